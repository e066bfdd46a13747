// The verbs link of the failover chain: the Transport interface over verbs::Conn (one per
// connection, in Socket::link_state) and an RDMA listener per listening socket (in
// Socket::listen_state). Registered as `verbs`, ranked after shm.
#include <dirent.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include "config_load.hpp"
#include "endpoint.hpp"
#include "fd_budget.hpp"
#include "log.hpp"
#include "real.hpp"
#include "shm_peer_cookie.hpp"
#include "socket.hpp"
#include "transport_conn.hpp"
#include "verbs_cm.hpp"
#include "verbs_conn.hpp"

namespace fastsock {

namespace {

constexpr int kVerbs = int(TransportId::verbs);

// 16 credits per direction; messages of up to 16 KiB. Send slots are per connection (1 KiB
// until it sends larger messages), receive slots come from the process's pool on the device
// (docs/verbs.md, "Memory").
constexpr uint32_t kSlots = 16;
constexpr uint32_t kSlotBytes = 16 * 1024;

int64_t coarse_now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The data calls (send, recv, poll_now, ...) forward to verbs::Conn: src/transport_conn.hpp.
class VerbsTransport final : public ConnTransport<VerbsTransport, verbs::Conn> {
 public:
  TransportId id() const noexcept override { return TransportId::verbs; }

  int on_listen(Socket& s) noexcept override {
    const char* why = "";
    verbs::Cm* cm = verbs::Cm::get(&why);
    void* handle = cm ? cm->listen(s.slot->local, shm::socket_cookie(s.slot->fd), &why) : nullptr;
    if (!handle) {
      LOG_DEBUG("fd=%d verbs: no RDMA listener: %s", s.slot->fd, why);
      return -ENODEV;
    }
    s.listen_state[kVerbs] = handle;
    return 0;
  }

  void close_listener(Socket& s) noexcept override {
    verbs::Cm::unlisten(s.listen_state[kVerbs]);
    s.listen_state[kVerbs] = nullptr;
  }

  void prepare_connect(Socket&, const sockaddr*, socklen_t, bool) noexcept override {}

  int attach(Socket& s, Side side, Socket* listener, char* why, size_t why_len) noexcept override {
    const char* reason = "";
    if (side == Side::server && (!listener || !listener->listen_state[kVerbs])) {
      snprintf(why, why_len, "the listener has no RDMA listener");
      return -ENOENT;
    }
    if (!fd_budget::room_for_link(s.slot->fd)) {
      snprintf(why, why_len, "%s", fd_budget::kNoRoomReason);
      return -EMFILE;
    }
    // A connector does not wait for a service still opening its channel (a new process's
    // first connection: about 100 ms in the Soft-RoCE VM); its connect request is queued.
    verbs::Cm* cm = side == Side::client ? verbs::Cm::get_started(&reason) : verbs::Cm::get(&reason);
    if (!cm) {
      snprintf(why, why_len, "%s", reason);
      return -ENODEV;
    }
    // A pre-forking server: the child accepts on the parent's socket, but the RDMA
    // listener, and every connect request that arrives on it, is the parent's, which
    // redirects the request to a listener of this process (Cm::redirect_here) — unless
    // the parent has exited, and this process takes its listener over.
    bool inherited = side == Side::server && !verbs::Cm::listens_here(listener->listen_state[kVerbs]);
    if (inherited) {
      verbs::Cm::check_inherited();
      inherited = !verbs::Cm::listens_here(listener->listen_state[kVerbs]);
    }
    verbs::TcpKey key{};
    key.peer = s.slot->peer;
    key.local = s.slot->local;
    if (key.local.family == 0) {  // not asked of the kernel yet (see ops::connect)
      sockaddr_storage addr;
      socklen_t len = sizeof addr;
      if (real().getsockname(s.slot->fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        key.local = endpoint_from(reinterpret_cast<sockaddr*>(&addr), len);
    }
    if (key.peer.family == 0 || key.local.family == 0) {
      snprintf(why, why_len, "the connection's addresses are unknown");
      return -ENOTCONN;
    }
    auto* c = new (std::nothrow)
        verbs::Conn(*cm, verbs::ConnOptions{kSlots, kSlotBytes, config().spin_us,
                                              config().verbs_zero_copy ? config().verbs_zero_copy_min : 0});
    if (!c) {
      snprintf(why, why_len, "out of memory");
      return -ENOMEM;
    }
    c->set_socket(s.slot->fd, &s.mode);
    const int rc = side == Side::client ? c->start_connector(key, &reason)
                                        : c->start_acceptor(key, &reason);
    if (rc < 0) {
      snprintf(why, why_len, "%s (%s)", reason, strerrordesc_np(-rc));
      delete c;
      return rc;
    }
    if (inherited) {
      if (const int err = cm->redirect_here(listener->listen_state[kVerbs], key, &reason); err < 0) {
        snprintf(why, why_len, "the listening socket was inherited over fork: %s", reason);
        delete c;
        return err;
      }
    }
    s.link_state = c;
    // Reported on tcp until the RDMA connection is up (carries_at_attach): the slot says
    // why meanwhile, after the reasons of the links skipped before this one, which
    // note_fallback gives back alone once the link carries the connection.
    c->set_skipped_reasons_len(strnlen(s.slot->reason, sizeof s.slot->reason));
    append_reason(s.slot->reason, sizeof s.slot->reason, "verbs: RDMA connection under way");
    return 0;
  }

  bool carries_at_attach() const noexcept override { return false; }
  void on_tracked(Socket& s) noexcept override {
    if (s.link_state)
      conn(s).report_in(&s.slot->transport, uint8_t(TransportId::verbs), s.slot->reason);
  }
  int64_t recheck_at(Socket& s, short events) noexcept override {
    auto* c = static_cast<verbs::Conn*>(s.link_state);
    return c ? c->recheck_at(events) : 0;
  }
  bool peer_shares_cpu(Socket&) noexcept override { return false; }
  void option_set(Socket& s, int level, int name, const void* value,
                  socklen_t len) noexcept override {
    bool abortive;
    if (s.link_state && abortive_linger(level, name, value, len, &abortive))
      conn(s).set_abortive_close(abortive);
  }
  void detach(Socket& s) noexcept override {
    auto* c = static_cast<verbs::Conn*>(s.link_state);
    if (!c) return;
    c->close(s.slot->fd);
    delete c;
    s.link_state = nullptr;
  }

 private:
  friend ConnTransport;

  // The connection is reported on verbs once its RDMA connection is up (every byte sent
  // from then on goes over the link: verbs::Conn::report_in), and on tcp again, with the
  // reason, when it stays on TCP (the RDMA connection failed, was refused, never came) or
  // goes back (an end downgraded, the link failed), noted here at the connection's next
  // call; once nothing is left on the link, its data calls go straight to the kernel.
  static void note_fallback(Socket& s) noexcept {
    verbs::Conn& c = conn(s);
    if (c.state() == verbs::Conn::State::connecting) {
      if (!c.stale(int64_t(s.slot->opened_ns), coarse_now_ns())) return;
    }
    const verbs::Conn::State state = c.state();
    if (state != verbs::Conn::State::tcp && state != verbs::Conn::State::broken) return;
    if (c.settled()) s.user_io.store(false, std::memory_order_relaxed);
    if (!c.note_fallback_once()) return;  // already said
    s.slot->transport = uint8_t(TransportId::tcp);
    snprintf(s.slot->reason, sizeof s.slot->reason, "verbs: %s%s",
             state == verbs::Conn::State::broken ? "broken: " : "",
             c.fallback_reason() ? c.fallback_reason() : "?");
    LOG_DEBUG("fd=%d falls back to tcp (%s)", s.slot->fd, s.slot->reason);
  }
};

// Cheap enough for every process: one directory read. A host without RDMA devices pays
// nothing more; the libraries are loaded only where a device exists.
Probe probe_verbs() noexcept {
  static const Probe probe = [] {
    Probe p;
    DIR* dir = opendir("/sys/class/infiniband");
    bool device = false;
    if (dir) {
      while (dirent* e = readdir(dir))
        if (e->d_name[0] != '.') device = true;
      closedir(dir);
    }
    if (!device) {
      snprintf(p.reason, sizeof p.reason, "no RDMA device (/sys/class/infiniband is empty)");
      return p;
    }
    const char* why = "";
    if (!verbs::lib(&why)) {
      snprintf(p.reason, sizeof p.reason, "%s", why);
      return p;
    }
    p.available = true;
    snprintf(p.reason, sizeof p.reason, "RDMA devices present (libibverbs, librdmacm loaded)");
    return p;
  }();
  return probe;
}

constexpr TransportEntry kEntry{TransportId::verbs, 10, probe_verbs,
                                the_instance<VerbsTransport>};

}  // namespace

const TransportEntry& verbs_transport_entry() noexcept { return kEntry; }

}  // namespace fastsock
