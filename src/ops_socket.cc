// Connection lifecycle: which sockets are tracked, and the chain decision at connect/accept.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "adopt.hpp"
#include "chain.hpp"
#include "config_load.hpp"
#include "endpoint.hpp"
#include "epoll_merge.hpp"
#include "exec_handover.hpp"
#include "fd_table.hpp"
#include "guard.hpp"
#include "log.hpp"
#include "ops.hpp"
#include "real.hpp"
#include "result.hpp"
#include "stats.hpp"
#include "user_io.hpp"

namespace fastsock::ops {

// Helpers shared with the start-up adoption below.

// Only TCP over IPv4/IPv6 is tracked; every other socket passes through untouched.
static bool is_tcp(int domain, int type, int protocol) {
  return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
         (protocol == 0 || protocol == IPPROTO_TCP);
}

// When a connection opened, for `fastsock stat`: the coarse clock (a few ms of resolution)
// reads the time without the cycle counter, which a connection's setup would otherwise pay.
static uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

static stats::Endpoint local_endpoint(int fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  return endpoint_from(reinterpret_cast<sockaddr*>(&ss), len);
}

static bool is_wildcard(const stats::Endpoint& ep) {
  if (ep.family != AF_INET && ep.family != AF_INET6) return true;
  const size_t n = ep.family == AF_INET ? 4 : 16;
  for (size_t i = 0; i < n; ++i)
    if (ep.addr[i]) return false;
  return true;
}

// Gives a socket that is becoming a connection or a listener a slot of the published stats
// area (if one is free), so its description is written there directly; until then it lives in
// the Socket's private slot, which only holds the fd.
static void claim_shared_slot(Socket& s) {
  // (A socket whose listen() failed keeps the slot it claimed for it.)
  stats::Slot* shared = s.slot != &s.private_slot ? s.slot : stats::claim_slot();
  if (!shared) return;
  // A retired slot kept its old description (retire_slot only clears the counters).
  shared->fd = s.private_slot.fd;
  shared->role = uint8_t(stats::Role::none);
  shared->peer = {};
  shared->reason[0] = '\0';
  s.slot = shared;
}

// The description is complete: make it visible to `fastsock stat` with `state`.
static void publish(Socket& s, stats::SlotState state) {
  s.slot->state.store(uint32_t(state), std::memory_order_release);
}

// The kernel connection exists: pick the link, publish, log.
static void track_connection(Socket& s, int fd, Side side, Socket* listener,
                             const stats::Endpoint& local, const stats::Endpoint& peer) {
  claim_shared_slot(s);
  stats::Slot& slot = *s.slot;
  slot.fd = fd;
  slot.role = uint8_t(side == Side::client ? stats::Role::client : stats::Role::server);
  slot.local = local;
  slot.peer = peer;
  slot.opened_ns = now_ns();
  choose_link(s, side, listener);
  publish(s, stats::SlotState::connected);
  if (log_enabled(LogLevel::debug)) {
    char l[64], p[64];
    format_endpoint(local, l, sizeof l);
    format_endpoint(peer, p, sizeof p);
    auto name = transport_name(TransportId(s.slot->transport));
    LOG_DEBUG("fd=%d %s %s %s %s on %.*s (%s)", fd, side == Side::client ? "client" : "server",
              l, side == Side::client ? "->" : "<-", p, int(name.size()), name.data(),
              s.slot->reason);
  }
  s.link->on_tracked(s);
}

long socket(int domain, int type, int protocol) {
  const int fd = real().socket(domain, type, protocol);
  if (fd < 0) return -errno;
  if (!is_tcp(domain, type, protocol) || inside_library()) {
    fd_table::remove(fd);  // the number may have belonged to a socket closed behind our back
    return fd;
  }
  (void)config();  // first tracked socket: load the configuration now, not at load time
  SocketRef s = fd_table::make_socket();
  if (s) {
    s->domain = domain;
    s->slot->fd = fd;
    s->mode.made(fd, type);
  }
  // Out of memory: the descriptor is simply untracked (pass-through), never an error.
  fd_table::install_owned(fd, std::move(s));
  return fd;
}

long socketpair(int domain, int type, int protocol, int sv[2]) {
  // The kernel only makes pairs of Unix sockets: nothing to track.
  return neg_errno(real().socketpair(domain, type, protocol, sv));
}

long bind(int fd, const sockaddr* addr, socklen_t len) {
  return neg_errno(real().bind(fd, addr, len));
}

// Every usable link of the chain gets to prepare for incoming upgrades (the shm record,
// the RDMA listener, ...), for the listener at `local`.
static void prepare_links(Socket& s, const stats::Endpoint& local) {
  claim_shared_slot(s);
  stats::Slot& slot = *s.slot;
  slot.role = uint8_t(stats::Role::listener);
  slot.local = local;
  slot.opened_ns = now_ns();
  slot.transport = uint8_t(TransportId::tcp);
  for (TransportId id : config().chain) {
    const TransportEntry* entry = find_transport(id);
    if (entry && entry->probe().available) (void)entry->instance().on_listen(s);
  }
}

// Every link that prepared for `s` closes its listener.
static void close_listeners(Socket& s) {
  for (int i = 0; i < kTransportCount; ++i)
    if (s.listen_state[i]) find_transport(TransportId(i))->instance().close_listener(s);
}

static void unprepare_links(Socket& s) {
  close_listeners(s);
  s.slot->role = uint8_t(stats::Role::none);
}

long listen(int fd, int backlog) {
  SocketRef s = fd_table::lookup(fd);
  const bool first = s && s->slot->role == uint8_t(stats::Role::none);  // not a relisten
  // A connector that finds no listener's record connects on TCP for good, so the links
  // prepare before the kernel accepts the first connection: a client retrying its connect
  // while the server starts (NPtcp does) would otherwise slip in between. A socket not yet
  // bound gets its port from listen() itself; no client can know that port before then.
  const stats::Endpoint bound = first ? local_endpoint(fd) : stats::Endpoint{};
  const bool early = first && bound.port != 0;
  if (early) prepare_links(*s, bound);
  if (real().listen(fd, backlog) != 0) {
    const int err = errno;
    if (early) unprepare_links(*s);
    return -err;
  }
  if (!first) return 0;  // untracked, or relisten
  if (!early) prepare_links(*s, local_endpoint(fd));
  stats::Slot& slot = *s->slot;
  publish(*s, stats::SlotState::listening);
  if (log_enabled(LogLevel::debug)) {
    char l[64];
    format_endpoint(slot.local, l, sizeof l);
    LOG_DEBUG("fd=%d listen %s", fd, l);
  }
  return 0;
}

long accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  SocketRef listener = fd_table::lookup(fd);
  if (!listener || inside_library()) {
    const int nfd = real().accept4(fd, addr, len, flags);
    if (nfd >= 0) fd_table::remove(nfd);
    return neg_errno(nfd);
  }
  // The peer's address: a link matching the connection needs it, and so does the debug log;
  // otherwise (e.g. every link but TCP is off) the kernel need not copy it out, and `fastsock
  // stat` finds it in /proc. Taken from the application's buffer when it asked for one.
  const bool need_peer = links_may_attach() || log_enabled(LogLevel::debug);
  sockaddr_storage own;
  socklen_t own_len = sizeof own;
  // The application's own arguments go to the kernel untouched (an addr without a len is
  // its EFAULT to get).
  sockaddr* peer = addr ? addr : need_peer ? reinterpret_cast<sockaddr*>(&own) : nullptr;
  socklen_t* peer_len = addr ? len : need_peer ? &own_len : nullptr;
  const socklen_t room = peer && peer_len ? *peer_len : 0;
  const int nfd = real().accept4(fd, peer, peer_len, flags);
  if (nfd < 0) return -errno;
  stats::Endpoint peer_ep{};
  if (peer && peer_len && *peer_len <= room) {
    peer_ep = endpoint_from(peer, *peer_len);
  } else if (need_peer) {  // the application's buffer was too small for the whole address
    own_len = sizeof own;
    if (real().getpeername(nfd, reinterpret_cast<sockaddr*>(&own), &own_len) == 0)
      peer_ep = endpoint_from(reinterpret_cast<sockaddr*>(&own), own_len);
  }
  SocketRef s = fd_table::make_socket();
  if (s) {
    s->domain = listener->domain;
    // A listener bound to one address gives its connections that local address; only a
    // wildcard listener needs the kernel to say which address the peer reached.
    const stats::Endpoint& bound = listener->slot->local;
    track_connection(*s, nfd, Side::server, listener.get(),
                     is_wildcard(bound) ? local_endpoint(nfd) : bound, peer_ep);
  }
  fd_table::install_owned(nfd, std::move(s));
  return nfd;
}

long connect(int fd, const sockaddr* addr, socklen_t len) {
  SocketRef s = fd_table::lookup(fd);
  // Only a socket's first connect makes a connection (a repeated connect of a non-blocking
  // socket reports the first one's progress).
  const bool first = s && s->slot->role == uint8_t(stats::Role::none) && !inside_library();
  stats::Endpoint peer{};
  if (first) {
    peer = endpoint_from(addr, len);
    if (peer.family != 0) prepare_links(*s, addr, len);
  }
  const int rc = real().connect(fd, addr, len);
  const int err = rc == 0 ? 0 : errno;
  // A non-blocking connect is a connection in the making: decide now, as for a blocking one.
  // So is a blocking one interrupted by a signal (POSIX: it goes on asynchronously), and a
  // link may have told the listener about it already (shm's hello).
  if (first && peer.family != 0 && (rc == 0 || err == EINPROGRESS || err == EINTR)) {
    // The local address costs a system call per connection, and only the debug log
    // needs it now; `fastsock stat` looks it up in /proc when it is unknown.
    const stats::Endpoint local =
        log_enabled(LogLevel::debug) ? local_endpoint(fd) : stats::Endpoint{};
    track_connection(*s, fd, Side::client, nullptr, local, peer);
  }
  return rc == 0 ? 0 : -err;
}

long shutdown(int fd, int how) {
  SocketRef s = fd_table::lookup(fd);
  if (s && s->link) return s->link->shutdown(*s, fd, how);
  return neg_errno(real().shutdown(fd, how));
}

long getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  return neg_errno(real().getsockopt(fd, level, name, value, len));
}

long setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  if (real().setsockopt(fd, level, name, value, len) != 0) return -errno;
  if (level == SOL_SOCKET) fd_table::mode_changed(fd);  // SO_RCVTIMEO, SO_SNDTIMEO
  // The kernel accepted it; a link that carries the data itself may need to know (e.g.
  // SO_LINGER decides how its close ends the stream).
  // Only such links care: a connection the kernel carries needs no reference taken here.
  const Socket* hint = fd_table::peek(fd);
  if (hint && hint->user_io.load(std::memory_order_relaxed)) {
    SocketRef s = fd_table::lookup(fd);
    if (s && user_link(*s)) s->link->option_set(*s, level, name, value, len);
  }
  return 0;
}

long getsockname(int fd, sockaddr* addr, socklen_t* len) {
  return neg_errno(real().getsockname(fd, addr, len));
}

long getpeername(int fd, sockaddr* addr, socklen_t* len) {
  return neg_errno(real().getpeername(fd, addr, len));
}

}  // namespace fastsock::ops

namespace fastsock {

namespace {

// A connection the previous program image handed over (exec_handover.hpp) continues on
// its link. If that fails, the socket is shut down: its peer sends into shared state that
// nobody here reads, so an end of stream is the only honest answer (never a hang).
void continue_over_exec(Socket& s, int fd, const struct stat& st, const exec_handover::Entry& e) {
  stats::Slot& slot = *s.slot;
  if (st.st_ino != e.inode) {
    // A descriptor number the previous image did not hand over (reused since): leave it.
    snprintf(slot.reason, sizeof slot.reason, "inherited at exec: stays on tcp");
    return;
  }
  char why[96] = "the link is not in this build";
  const TransportEntry* entry = find_transport(e.link);
  if (entry && entry->instance().adopt(s, fd, e.token, why, sizeof why) == 0) {
    s.link = &entry->instance();
    s.user_io.store(!s.link->kernel_carries_data(), std::memory_order_relaxed);
    slot.transport = uint8_t(e.link);
    snprintf(slot.reason, sizeof slot.reason, "continued over exec");
    const std::string_view name = transport_name(e.link);
    LOG_DEBUG("fd=%d continues on %.*s after exec", fd, int(name.size()), name.data());
    return;
  }
  LOG_ERROR("fd=%d: the connection cannot continue after exec (%s): shut down", fd, why);
  (void)real().shutdown(fd, SHUT_RDWR);
  snprintf(slot.reason, sizeof slot.reason, "could not continue over exec: %s", why);
}

// Enters one descriptor found at start-up into the table if it is a TCP socket.
void adopt_one(int fd) noexcept {
  exec_handover::Entry handed;
  const exec_handover::Role handed_role = exec_handover::find(fd, handed);
  // A further descriptor of a handed-over connection joins its first one's Socket (see
  // adopt_inherited_sockets), as dup'ed descriptors share one.
  if (handed_role == exec_handover::Role::extra) return;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  int domain = 0, type = 0, protocol = 0, listening = 0;
  socklen_t len = sizeof(int);
  if (real().getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return;
  len = sizeof(int);
  if (real().getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return;
  len = sizeof(int);
  if (real().getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) return;
  if (!ops::is_tcp(domain, type, protocol)) return;
  len = sizeof(int);
  (void)real().getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);

  (void)config();
  SocketRef s = fd_table::make_socket();
  if (!s) return;
  s->domain = domain;
  s->link = &find_transport(TransportId::tcp)->instance();
  s->slot->fd = fd;
  sockaddr_storage peer;
  socklen_t peer_len = sizeof peer;
  const bool connected =
      !listening && real().getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0;
  if (listening || connected) ops::claim_shared_slot(*s);
  stats::Slot& slot = *s->slot;
  slot.local = ops::local_endpoint(fd);
  slot.opened_ns = ops::now_ns();
  slot.transport = uint8_t(TransportId::tcp);
  if (listening) {
    slot.role = uint8_t(stats::Role::listener);
    ops::publish(*s, stats::SlotState::listening);
  } else if (connected) {
    // The kernel has carried it since before this program started; it stays there.
    slot.role = uint8_t(stats::Role::inherited);
    slot.peer = endpoint_from(reinterpret_cast<sockaddr*>(&peer), peer_len);
    if (handed_role == exec_handover::Role::first)
      continue_over_exec(*s, fd, st, handed);
    else
      snprintf(slot.reason, sizeof slot.reason, "inherited at exec: stays on tcp");
    ops::publish(*s, stats::SlotState::connected);
  }
  fd_table::install(fd, s.get());
  LOG_DEBUG("fd=%d inherited %s", fd,
            listening ? "listener" : slot.role ? "connection" : "unconnected socket");
}

}  // namespace

void adopt_inherited_sockets() noexcept {
  const int saved_errno = errno;
  ReentryGuard guard;
  // /proc/self/fd lists exactly the descriptors this process holds; without /proc the
  // inherited sockets simply stay untracked (pass-through).
  DIR* dir = opendir("/proc/self/fd");
  if (dir) {
    const int own = dirfd(dir);
    while (dirent* entry = readdir(dir)) {
      char* end = nullptr;
      long fd = strtol(entry->d_name, &end, 10);
      if (end != entry->d_name && *end == '\0' && fd != own && fd >= 0 && fd < INT32_MAX)
        adopt_one(int(fd));
    }
    closedir(dir);
  }
  // Only where the first descriptor's connection was taken over (its link carries it).
  exec_handover::for_each_extra([](int extra_fd, int first_fd) {
    SocketRef s = fd_table::lookup(first_fd);
    if (s && ops::user_link(*s) && fd_table::peek(extra_fd) == nullptr)
      fd_table::install(extra_fd, s.get());
  });
  errno = saved_errno;
}

void on_socket_released(Socket& s) noexcept {
  const int saved_errno = errno;
  stats::Slot& slot = *s.slot;
  if (slot.role != uint8_t(stats::Role::none)) {
    LOG_DEBUG("fd=%d closed sent=%llu received=%llu", slot.fd,
              static_cast<unsigned long long>(slot.bytes_sent.load(std::memory_order_relaxed)),
              static_cast<unsigned long long>(slot.bytes_received.load(std::memory_order_relaxed)));
  }
  epoll_merge::forget_socket(s);
  if (s.link) s.link->detach(s);
  ops::close_listeners(s);
  if (s.slot != &s.private_slot) stats::retire_slot(s.slot);
  errno = saved_errno;
}

}  // namespace fastsock
