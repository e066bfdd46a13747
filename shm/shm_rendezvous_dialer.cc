// The connector's side of the rendezvous: announce the connection on a channel to the
// listener's record (an idle one kept from an earlier connection, or a new one), send the
// hello, both before the SYN; after the connect, say where the connection comes from; read
// the reply whenever the caller likes.
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "endpoint.hpp"
#include "internal_fds.hpp"
#include "real.hpp"
#include "shm_rendezvous.hpp"
#include "shm_pool.hpp"
#include "shm_rendezvous_channels.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"
#include "shm_process.hpp"

namespace fastsock::shm {

namespace {

// Records are named by effective uid: another user's listener is not looked for.
constexpr const char* kNoListener = "no fastsock listener for this destination and this euid";

uint64_t splitmix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A nonce per hello: a per-process random seed (one getrandom, on first use), the pid (a
// forked child shares the seed and the counter) and a counter, through a bijective mixer,
// so two hellos of this host's processes practically never share one.
uint64_t next_nonce(pid_t pid) noexcept {
  static std::atomic<uint64_t> seed{0};
  static std::atomic<uint64_t> counter{0};
  uint64_t s = seed.load(std::memory_order_relaxed);
  if (s == 0) {
    uint64_t fresh = 0;
    if (getrandom(&fresh, sizeof fresh, GRND_NONBLOCK) != ssize_t(sizeof fresh)) {
      timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      fresh = splitmix64(uint64_t(ts.tv_nsec) ^ (uint64_t(ts.tv_sec) << 30));
    }
    fresh |= 1;  // never 0, which means "not seeded"
    seed.compare_exchange_strong(s, fresh, std::memory_order_relaxed);
    s = seed.load(std::memory_order_relaxed);
  }
  const uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  return splitmix64(s ^ (uint64_t(uint32_t(pid)) << 32) ^ n);
}

// A Unix datagram socket kept per thread to look for records. A failed SOCK_SEQPACKET
// connect() costs as much as creating a socket (the kernel allocates the new connection
// before it looks the name up, ~1.5 us here), and most dials find no record (the server
// does not run fastsock), some after trying three names. A datagram connect() to the
// record's presence name (Listener binds one next to the record; abstract names are per
// socket type) only looks the name up (~0.35 us), so misses stay cheap and only a hit
// creates the SOCK_SEQPACKET socket. Tagged with the pid that made it: a forked child must
// neither use its parent's socket (they would share it) nor close that number (the child
// may have closed and reused it), so it just forgets it.
struct ProbeCache {
  int fd = -1;
  pid_t pid = 0;
  ~ProbeCache() {
    if (fd >= 0 && pid == current_pid()) internal_fds::close(fd);
  }
};
thread_local ProbeCache t_probe;

int probe_socket(pid_t pid) noexcept {
  if (t_probe.fd < 0 || t_probe.pid != pid) {
    t_probe.fd = internal_fds::take(real().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    t_probe.pid = pid;
  }
  return t_probe.fd;
}

// Looks the names of `names[first, count)` up through the probe socket; fills `addr` with
// the first that has a presence socket and returns its length, or 0.
socklen_t find_record(int probe, uid_t uid, const RecordName* names, int first, int count,
                      sockaddr_un& addr) noexcept {
  // A datagram connect may be redone at will.
  for (int i = first; i < count; ++i) {
    const socklen_t len = record_address(uid, names[i].endpoint, names[i].stack, addr);
    if (len != 0 && real().connect(probe, reinterpret_cast<const sockaddr*>(&addr), len) == 0)
      return len;
  }
  return 0;
}

// A new channel to the record of `uid` that `dst` reaches. The fd, or -errno with `why`. `scope_id`: the destination's sin6_scope_id.
int dial_new_channel(uid_t uid, pid_t pid, const stats::Endpoint& ep, uint32_t scope_id,
                     const char** why) noexcept {
  RecordName names[kMaxRecordCandidates];
  int count = record_candidates(ep, names);
  const int probe = probe_socket(pid);
  if (probe < 0) {
    *why = "cannot create a rendezvous socket";
    return -errno;
  }
  // The first name with a presence socket.
  sockaddr_un addr;
  socklen_t addr_len = find_record(probe, uid, names, 0, count, addr);
  if (addr_len == 0 && needs_local_proof(ep)) {
    // Another address than loopback: the wildcard records serve it only if it is an address
    // of this host. Their lookups are cheap and usually miss (a destination on another
    // host), so they come first, and the proof (4 system calls) only when one exists.
    count = record_candidates(ep, true, names);
    addr_len = find_record(probe, uid, names, 1, count, addr);
    if (addr_len != 0 && !destination_is_local(ep, scope_id)) {
      *why = "destination is not an address of this host (its wildcard records do not apply)";
      return -ECONNREFUSED;
    }
  }
  if (addr_len == 0) {
    *why = kNoListener;
    return -ECONNREFUSED;
  }
  const int fd =
      internal_fds::take(real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd < 0) {
    *why = "cannot create a rendezvous socket";
    return -errno;
  }
  if (real().connect(fd, reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0) {
    const int err = -errno;
    internal_fds::close(fd);
    if (err == -EAGAIN) {
      // The record exists but its backlog is full: never wait for it.
      *why = "rendezvous record busy (backlog full)";
      return err;
    }
    // Gone since the probe, or a presence name without a record (squatted): no listener.
    *why = kNoListener;
    return err == -ECONNREFUSED || err == -ENOENT || err == -EPROTOTYPE ? -ECONNREFUSED : err;
  }
  // Abstract names have no permissions: anybody can bind any name. Only a record of our
  // own uid gets our descriptors (checked once per channel).
  struct ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (real().getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 ||
      peer_len != sizeof peer || peer.uid != uid) {
    internal_fds::close(fd);
    *why = "rendezvous record belongs to another uid";
    return -EPERM;
  }
  return fd;
}

}  // namespace

int Dialer::dial(const sockaddr* dst, socklen_t dst_len, const char** why) noexcept {
  close();
  const stats::Endpoint ep = canonical_endpoint(endpoint_from(dst, dst_len));
  if (ep.family == 0) {
    *why = "destination is not IPv4/IPv6";
    return -EAFNOSUPPORT;
  }
  const uid_t uid = effective_uid();
  const pid_t pid = current_pid();
  // An idle channel to this destination's listener (its hello fails at once if the listener
  // closed, restarted or dropped it since: -ESTALE from send_hello), else a new one.
  // (A cached channel is to the most specific record that existed when it was made; a
  // more specific one cannot appear beside it, as the TCP listeners' bind() would clash.)
  Pool* pool = nullptr;
  int fd = channels::take(uid, ep, pid, pool);
  kept_ = fd >= 0;
  if (fd < 0) {
    const uint32_t scope_id =
        dst->sa_family == AF_INET6 && dst_len >= socklen_t(sizeof(sockaddr_in6))
            ? reinterpret_cast<const sockaddr_in6*>(dst)->sin6_scope_id
            : 0;
    fd = dial_new_channel(uid, pid, ep, scope_id, why);
    if (fd < 0) return fd;
    pool = Pool::create();  // (none: this channel's connections are unpooled)
  }
  fd_ = fd;
  pool_ = pool;
  slot_op_ = SlotOp::unpooled;
  slot_ = 0;
  pid_ = pid;
  uid_ = uid;
  destination_ = ep;
  server_port_ = ep.port;
  cookie_ = 0;
  late_ = false;
  return 0;
}

int Dialer::send_to_listener(const void* wire, size_t len, const int* fds, int count) noexcept {
  if (!real_uid_differs()) return send_message(fd_, wire, len, fds, count);
  // The kernel would attach our real uid; the acceptor compares the uid with its own
  // effective one, which the record's name says is ours. (A process whose gid changed
  // behind the library sends credentials of the moment: getegid() is asked every time,
  // only in this uncommon case.)
  const ucred creds{pid_, uid_, getegid()};
  return send_message(fd_, wire, len, fds, count, &creds);
}

int Dialer::send_hello(uint64_t cookie, const int* fds, int count, const char** why) noexcept {
  if (fd_ < 0) {
    *why = "not dialled";
    return -ENOTCONN;
  }
  Hello h;
  h.cookie = cookie;
  if (cookie == 0 || count < 0 || count > kMaxPassedFds) {
    *why = "invalid socket cookie or descriptor count";
    return -EINVAL;
  }
  h.pid = pid_;
  h.nonce = next_nonce(h.pid);
  h.server_port = server_port_;
  h.fd_count = uint8_t(count);
  h.slot_op = slot_op_;
  h.slot = slot_;
  const HelloWire wire = encode_hello(h);
  const int rc = send_to_listener(&wire, sizeof wire, fds, count);
  if (rc != 0) {
    const bool stale = kept_;
    close();  // with its pool: the listener's side of it is gone
    *why = stale ? "the kept rendezvous channel was closed by its listener"
                 : "cannot send the hello";
    return stale ? -ESTALE : rc;
  }
  nonce_ = h.nonce;
  cookie_ = cookie;
  return 0;
}

int Dialer::send_where(const stats::Endpoint& local, const char** why) noexcept {
  if (fd_ < 0 || cookie_ == 0) {
    *why = "no hello sent";
    return -ENOTCONN;
  }
  Where w;
  w.cookie = cookie_;
  w.connector = canonical_endpoint(local);
  if (w.connector.family == 0 || w.connector.port == 0) {
    *why = "invalid local endpoint";
    return -EINVAL;
  }
  const WhereWire wire = encode_where(w);
  if (const int rc = send_to_listener(&wire, sizeof wire, nullptr, 0); rc != 0) {
    *why = "cannot send the local endpoint";
    return rc;
  }
  return 0;
}

ReplyStatus Dialer::poll_reply(Reply& reply, PassedFds& fds, const char** why) noexcept {
  if (fd_ < 0) {
    *why = "not dialled";
    return ReplyStatus::gone;
  }
  ReplyWire wire;
  Received r;
  recv_message(fd_, &wire, sizeof wire, r);
  if (r.len == -EAGAIN) return ReplyStatus::pending;
  if (r.len <= 0) {
    close();
    *why = "the acceptor closed the rendezvous without answering";
    return ReplyStatus::gone;
  }
  WireError err = decode_reply(&wire, size_t(r.len), r.truncated, reply);
  if (!err && reply.nonce != nonce_) err = "reply to another hello (nonce differs)";
  // An acceptance whose descriptor the kernel had to drop (this process is out of them:
  // MSG_CTRUNC, none received) is still an acceptance: the caller decides what it can do
  // without the descriptor (Conn::check_peer).
  const bool fds_dropped = !err && reply.accepted && r.ctrunc && r.control.fd_count == 0;
  if (!err && !fds_dropped) err = check_control(r.control, reply.fd_count, r.ctrunc);
  if (err) {
    close();  // not our protocol: the channel is not used again
    close_fds(r.control.fds, r.control.fd_count);
    *why = err;
    return ReplyStatus::invalid;
  }
  release_channel();
  if (!reply.accepted) {
    *why = "the acceptor rejected the upgrade";
    return ReplyStatus::rejected;
  }
  fds.adopt(r.control.fds, r.control.fd_count);
  return ReplyStatus::accepted;
}

void Dialer::answered_in_segment() noexcept {
  if (fd_ >= 0) release_channel();
}

void Dialer::adopt_late(int fd, uint16_t server_port) noexcept {
  close();
  fd_ = fd;
  slot_op_ = SlotOp::unpooled;
  slot_ = 0;
  pid_ = current_pid();
  uid_ = effective_uid();
  destination_ = stats::Endpoint{};
  server_port_ = server_port;
  cookie_ = 0;
  kept_ = false;
  late_ = true;
}

// The handshake is over: the channel (and its pool) serves the next connection; a late
// attach's serves no other.
void Dialer::release_channel() noexcept {
  if (late_) {
    // Closed with the Dialer, not now: an epoll set of the application may still watch it
    // (the connection's wake descriptors while the answer was awaited), and a number
    // closed now could be reused by the application's next descriptor.
    answered_fd_ = fd_;
    fd_ = -1;
    return;
  }
  channels::give_back(uid_, destination_, pid_, fd_, pool_);
  fd_ = -1;
  pool_ = nullptr;
}

bool Dialer::withdraw() noexcept {
  if (fd_ < 0 || cookie_ == 0) return false;
  const WithdrawWire wire = encode_withdraw(Withdraw{nonce_, cookie_});
  if (send_to_listener(&wire, sizeof wire, nullptr, 0) != 0) {
    close();
    return false;
  }
  // The holder reads it before anything sent on the channel after it.
  release_channel();
  return true;
}

void Dialer::close() noexcept {
  if (fd_ >= 0) internal_fds::close(fd_);
  if (answered_fd_ >= 0) internal_fds::close(answered_fd_);
  fd_ = answered_fd_ = -1;
  if (pool_) pool_->close();
  pool_ = nullptr;
}

}  // namespace fastsock::shm
