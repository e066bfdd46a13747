// The shm link of the failover chain: the Transport interface over shm::Conn (one per
// connection, in Socket::link_state) and shm::Listener (one per listening socket, in
// Socket::listen_state). Registered as `shm`, ranked first.
#include <netinet/in.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "config_load.hpp"
#include "epoll_merge.hpp"
#include "fd_budget.hpp"
#include "log.hpp"
#include "real.hpp"
#include "shm_conn.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_name.hpp"
#include "shm_sys.hpp"
#include "socket.hpp"
#include "transport_conn.hpp"

namespace fastsock {

namespace {

constexpr int kShm = int(TransportId::shm);

// Measured with bench/shm_ring_bench (bench/results/shm_ring.txt, docs/shm.md): below this,
// copying through the ring is faster than the peer's process_vm_readv of the sender's
// buffer; from here on the handoff wins.
constexpr size_t kHandoffThreshold = 128 * 1024;

constexpr const char* kNotFirst =
    "an earlier link of FASTSOCK_TRANSPORTS is usable (shm is offered only as the first)";

// Why the last prepare_connect of this thread found no partner (read by attach, which runs
// in the same connect() call).
thread_local const char* t_prepare_why = nullptr;
// src/fd_budget.hpp: the eventfds of more shm connections would eat into the descriptors
// the application may still need.
constexpr const char* kNoFdBudget = fd_budget::kNoRoomReason;

static_assert(kMinShmRingMax == shm::kMinWindow && kMaxShmRingMax == shm::kMaxWindowLimit,
              "FASTSOCK_SHM_RING_MAX's range is the shm protocol's");

shm::ConnOptions conn_options() {
  const uint32_t max = config().shm_ring_max;
  const uint32_t initial = std::min(shm::kDefaultInitialWindow, max);
  return shm::ConnOptions{shm::Limits{initial, max}, kHandoffThreshold, config().spin_us};
}

// A listening socket's record. Threads of one process may accept on it at once, and a
// Listener is not thread-safe: match() runs under the lock.
struct ListenRecord {
  std::mutex lock;
  shm::Listener listener;
};

bool is_wildcard_v6(const stats::Endpoint& ep) {
  if (ep.family != AF_INET6) return false;
  for (uint8_t b : ep.addr)
    if (b) return false;
  return true;
}

// The data calls (send, recv, poll_now, ...) forward to shm::Conn: src/transport_conn.hpp.
class ShmTransport final : public ConnTransport<ShmTransport, shm::Conn> {
 public:
  TransportId id() const noexcept override { return TransportId::shm; }

  int on_listen(Socket& s) noexcept override {
    auto* record = new (std::nothrow) ListenRecord;
    if (!record) return -ENOMEM;
    shm::Listener::Options options;
    if (is_wildcard_v6(s.slot->local)) {
      int v6only = 0;
      socklen_t len = sizeof v6only;
      (void)real().getsockopt(s.slot->fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len);
      options.v6only = v6only != 0;
    }
    const char* why = "";
    if (int rc = record->listener.open(s.slot->local, options, &why); rc < 0) {
      // (e.g. a second SO_REUSEPORT listener on the same port: its connections stay on TCP)
      LOG_DEBUG("fd=%d shm: no rendezvous record for this listener: %s", s.slot->fd, why);
      delete record;
      return rc;
    }
    s.listen_state[kShm] = record;
    return 0;
  }

  void close_listener(Socket& s) noexcept override {
    // Closing the record closes every connector's channel: their next connection dials a
    // new one (and finds the next listener, if any).
    delete static_cast<ListenRecord*>(s.listen_state[kShm]);
    s.listen_state[kShm] = nullptr;
  }

  void prepare_connect(Socket& s, const sockaddr* dst, socklen_t len,
                       bool first) noexcept override {
    release(s);
    if (!first) {
      // The hello goes before the SYN and the acceptor attaches on it: this end must then
      // attach too, which only the chain's first link is sure to do (docs/configuration.md).
      t_prepare_why = kNotFirst;
      return;
    }
    if (!fd_budget::room_for_link(s.slot->fd)) {
      t_prepare_why = kNoFdBudget;
      return;
    }
    t_prepare_why = "no fastsock listener";
    auto* c = new (std::nothrow) shm::Conn(conn_options(), s.mode);
    if (!c) {
      t_prepare_why = "out of memory";
      return;
    }
    const char* why = "no fastsock listener";
    if (c->prepare(s.slot->fd, dst, len, &why) < 0) {
      t_prepare_why = why;
      delete c;
      return;
    }
    // Owned from here: detach() releases it even if the connect fails.
    s.link_state = c;
    s.link = this;
  }

  int attach(Socket& s, Side side, Socket* listener, char* why, size_t why_len) noexcept override {
    const char* reason = "";
    int rc;
    if (side == Side::client) {
      if (!s.link_state) {
        snprintf(why, why_len, "%s", t_prepare_why ? t_prepare_why : "no fastsock listener");
        return -ECONNREFUSED;
      }
      rc = conn(s).start_connector(s.slot->fd, &reason);
    } else {
      auto* record = listener ? static_cast<ListenRecord*>(listener->listen_state[kShm]) : nullptr;
      if (!record) {
        snprintf(why, why_len, "the listener has no rendezvous record");
        return -ENOENT;
      }
      // The handshake is answered under the lock too: it holds the connector's channel,
      // lent by the Listener until the reply is sent (shm_rendezvous.hpp).
      std::lock_guard lock(record->lock);
      shm::MatchResult match = record->listener.match(s.slot->peer, s.slot->local);
      if (match.status != shm::MatchStatus::matched) {
        const char* not_ours = match.why ? match.why : "peer does not run fastsock";
        if (match.status == shm::MatchStatus::not_fastsock && may_attach_late(s, *record))
          return start_late(s, *record, not_ours, why, why_len);
        snprintf(why, why_len, "%s", not_ours);
        return match.error ? match.error : -ENOENT;
      }
      if (!fd_budget::room_for_link(s.slot->fd)) {
        const char* ignored;
        (void)match.handshake.reject(kNoFdBudget, &ignored);  // the connector stays on TCP
        snprintf(why, why_len, "%s", kNoFdBudget);
        return -EMFILE;
      }
      auto* c = new (std::nothrow) shm::Conn(conn_options(), s.mode);
      if (!c) {
        snprintf(why, why_len, "out of memory");
        return -ENOMEM;
      }
      s.link_state = c;
      rc = c->start_acceptor(match.handshake, &reason, s.slot->fd);
    }
    if (rc < 0) {
      snprintf(why, why_len, "%s (%s)", reason, strerrordesc_np(-rc));
      release(s);
    }
    return rc;
  }

  // A late attach changes what a wait watches (wait_fds): the epoll registrations follow.
  // Only send and recv make that change (never poll_now, which runs under a set's lock).
  ssize_t send(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) override {
    const ssize_t rc = ConnTransport::send(s, fd, iov, iovcnt, flags);
    if (conn(s).take_late_change()) epoll_merge::rewatch(s);
    return rc;
  }
  ssize_t recv(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) override {
    const ssize_t rc = ConnTransport::recv(s, fd, iov, iovcnt, flags);
    if (conn(s).take_late_change()) epoll_merge::rewatch(s);
    return rc;
  }

  // An accepted connection that only may attach late (start_late) says tcp, and why, from
  // the start.
  void on_tracked(Socket& s) noexcept override {
    if (s.link_state) note_fallback(s);
  }

  bool peer_shares_cpu(Socket& s) noexcept override { return conn(s).peer_on_my_cpu(); }
  int64_t recheck_at(Socket& s, short events) noexcept override {
    return conn(s).recheck_at(events);
  }
  int typed(Socket& s, bool begin, bool sending, int type, uint64_t bytes) noexcept override {
    if (!s.link_state || type <= 0 || type > 255) return 0;
    return conn(s).typed(begin, sending, uint8_t(type), bytes);
  }
  void option_set(Socket& s, int level, int name, const void* value,
                  socklen_t len) noexcept override {
    bool abortive;
    if (s.link_state && abortive_linger(level, name, value, len, &abortive))
      conn(s).set_abortive_close(abortive);
  }
  size_t exec_handover(Socket& s, int fd, char* out, size_t cap) noexcept override {
    (void)fd;
    return s.link_state ? conn(s).exec_handover(out, cap) : 0;
  }
  void exec_failed(Socket& s) noexcept override {
    if (s.link_state) conn(s).exec_failed();
  }
  int adopt(Socket& s, int fd, const char* token, char* why, size_t why_len) noexcept override {
    auto* c = new (std::nothrow) shm::Conn(conn_options(), s.mode);
    if (!c) {
      snprintf(why, why_len, "out of memory");
      return -ENOMEM;
    }
    const char* reason = "";
    if (int rc = c->adopt(fd, token, &reason); rc < 0) {
      snprintf(why, why_len, "%s", reason);
      delete c;
      return rc;
    }
    s.link_state = c;
    return 0;
  }
  void detach(Socket& s) noexcept override {
    if (s.link_state) conn(s).close();
    release(s);
  }

 private:
  friend ConnTransport;

  // A connection without a hello may still be a fastsock dialer's when other processes
  // accept on the listener too (its hello is in another's table): same host only (a
  // loopback peer, or one with this end's own address), where a late attach can follow.
  // Only where shm is the last usable link of the chain (the default chain on a host
  // without RDMA or a vendor library): a link after it would otherwise never be tried for
  // the connection's acceptor.
  static bool may_attach_late(Socket& s, ListenRecord& record) noexcept {
    if (!record.listener.shared() || !last_usable_link()) return false;
    const stats::Endpoint peer = shm::canonical_endpoint(s.slot->peer);
    const stats::Endpoint local = shm::canonical_endpoint(s.slot->local);
    return shm::is_loopback(peer) ||
           (peer.family == local.family && memcmp(peer.addr, local.addr, sizeof peer.addr) == 0);
  }

  static bool last_usable_link() noexcept {
    bool after = false;
    for (TransportId id : config().chain) {
      if (id == TransportId::shm) {
        after = true;
      } else if (after && id != TransportId::tcp) {
        const TransportEntry* entry = find_transport(id);
        if (entry && entry->probe().available) return false;
      }
    }
    return after;
  }

  // The connection stays on TCP (`not_ours` says why), through a Conn that counts its
  // bytes and looks for the connector's late-attach offer (shm_conn.hpp).
  static int start_late(Socket& s, ListenRecord& record, const char* not_ours, char* why,
                        size_t why_len) noexcept {
    if (!fd_budget::room_for_link(s.slot->fd)) {
      snprintf(why, why_len, "%s", not_ours);
      return -EMFILE;
    }
    auto* c = new (std::nothrow) shm::Conn(conn_options(), s.mode);
    if (!c) {
      snprintf(why, why_len, "%s", not_ours);
      return -ENOMEM;
    }
    c->start_late_acceptor(s.slot->peer, s.slot->local, record.listener.uid(), not_ours);
    s.link_state = c;
    return 0;  // reported on tcp, with the reason, at once (note_fallback)
  }

  static void release(Socket& s) noexcept {
    delete static_cast<shm::Conn*>(s.link_state);
    s.link_state = nullptr;
  }

  // A connection that fell back to TCP after attaching (the acceptor rejected it or never
  // answered, or either end downgraded it) says so in its stats slot, with the reason.
  static void note_fallback(Socket& s) noexcept {
    const shm::Conn::Phase phase = conn(s).phase();
    if (phase == shm::Conn::Phase::active &&
        s.slot->transport == uint8_t(TransportId::tcp)) {
      // A late attach: on shm from here.
      s.slot->transport = uint8_t(TransportId::shm);
      s.slot->reason[0] = '\0';
      LOG_DEBUG("fd=%d moves to shm (late attach)", s.slot->fd);
      return;
    }
    if (phase != shm::Conn::Phase::tcp && phase != shm::Conn::Phase::broken) return;
    // On TCP for good, once nothing is left to serve from here: the data calls go straight
    // to the kernel again (the Conn stays until the last close, for detach).
    if (conn(s).settled()) s.user_io.store(false, std::memory_order_relaxed);
    if (s.slot->transport != uint8_t(TransportId::shm)) return;  // already said
    s.slot->transport = uint8_t(TransportId::tcp);
    snprintf(s.slot->reason, sizeof s.slot->reason, "shm: %s%s",
             phase == shm::Conn::Phase::broken ? "broken: " : "", conn(s).fallback_reason());
    LOG_DEBUG("fd=%d falls back to tcp (%s)", s.slot->fd, s.slot->reason);
  }
};

Probe probe_shm() noexcept {
  // memfd_create is what every connection needs first; a kernel or seccomp policy without
  // it leaves shm unusable on this host.
  static const Probe probe = [] {
    Probe p;
    const int fd = memfd_create("fastsock-probe", MFD_CLOEXEC);
    if (fd < 0) {
      snprintf(p.reason, sizeof p.reason, "memfd_create fails here: %s", strerrordesc_np(errno));
      return p;
    }
    shm::sys::close(fd);
    p.available = true;
    snprintf(p.reason, sizeof p.reason, "same-host connections between processes under fastsock");
    return p;
  }();
  return probe;
}

constexpr TransportEntry kEntry{TransportId::shm, 0, probe_shm, the_instance<ShmTransport>};

}  // namespace

const TransportEntry& shm_transport_entry() noexcept { return kEntry; }

}  // namespace fastsock
