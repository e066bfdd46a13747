// Helpers of the rendezvous tests: loopback TCP sockets, endpoints, child processes, and
// counting this process's descriptors (to prove nothing leaks).
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "endpoint.hpp"
#include "shm_peer_cookie.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_channels.hpp"
#include "shm_rendezvous_io.hpp"
#include "stats_layout.hpp"

namespace rvtest {

using fastsock::stats::Endpoint;

inline Endpoint ep(const char* addr, uint16_t port) {
  Endpoint e{};
  e.port = port;
  if (inet_pton(AF_INET, addr, e.addr) == 1)
    e.family = AF_INET;
  else if (inet_pton(AF_INET6, addr, e.addr) == 1)
    e.family = AF_INET6;
  return e;
}

inline std::string text(const Endpoint& e) {
  char buf[64];
  fastsock::format_endpoint(e, buf, sizeof buf);
  return buf;
}

inline Endpoint local_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return Endpoint{};
  return fastsock::endpoint_from(reinterpret_cast<sockaddr*>(&ss), len);
}

inline Endpoint peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return Endpoint{};
  return fastsock::endpoint_from(reinterpret_cast<sockaddr*>(&ss), len);
}

// A listening TCP socket on `addr` (`port`, by default an ephemeral one), -1 on failure.
struct TcpServer {
  int fd = -1;
  Endpoint local{};
  ~TcpServer() {
    if (fd >= 0) close(fd);
  }
};
inline bool tcp_listen(TcpServer& s, const char* addr, bool v6only = false, uint16_t port = 0) {
  const Endpoint want = ep(addr, port);
  sockaddr_storage ss;
  const socklen_t len = fastsock::sockaddr_from(want, ss);
  s.fd = socket(want.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.fd < 0) return false;
  const int on = 1, v6 = v6only ? 1 : 0;
  setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (want.family == AF_INET6) setsockopt(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6);
  if (bind(s.fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(s.fd, 128) != 0)
    return false;
  s.local = local_of(s.fd);
  return true;
}

// A sockaddr for `e`, with `family` AF_INET6 turning an IPv4 endpoint into IPv4-mapped.
inline socklen_t to_sockaddr(const Endpoint& e, sockaddr_storage& ss, int family = 0) {
  if (family == AF_INET6 && e.family == AF_INET) {
    Endpoint m{};
    m.family = AF_INET6;
    m.port = e.port;
    m.addr[10] = m.addr[11] = 0xff;
    memcpy(m.addr + 12, e.addr, 4);
    return fastsock::sockaddr_from(m, ss);
  }
  return fastsock::sockaddr_from(e, ss);
}

// A TCP socket for a connect to `dst` from `family` (0: dst's own), not connected yet.
inline int tcp_socket(const Endpoint& dst, int family = 0) {
  sockaddr_storage ss;
  to_sockaddr(dst, ss, family);
  return socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

// A blocking TCP connect of `fd` to `dst`; closes `fd` and returns -1 on failure.
inline int tcp_connect_fd(int fd, const Endpoint& dst, int family = 0) {
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(dst, ss, family);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A blocking TCP connect to `dst` from a socket of `family` (0: dst's own). -1 on failure.
inline int tcp_connect(const Endpoint& dst, int family = 0) {
  return tcp_connect_fd(tcp_socket(dst, family), dst, family);
}

inline int dial(fastsock::shm::Dialer& d, const Endpoint& dst, int family = 0) {
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(dst, ss, family);
  const char* why = nullptr;
  return d.dial(reinterpret_cast<sockaddr*>(&ss), len, &why);
}

// Dials `dst` and sends the hello naming the socket `cookie` with `count` descriptors, as
// the library does: a kept channel that its listener closed is replaced (-ESTALE). 0 or
// -errno.
inline int dial_hello(fastsock::shm::Dialer& d, const Endpoint& dst, uint64_t cookie,
                      const int* fds, int count, int family = 0) {
  const char* why = nullptr;
  int rc = -ESTALE;
  for (int i = 0; i < fastsock::shm::Dialer::kMaxDials && rc == -ESTALE; ++i) {
    rc = dial(d, dst, family);
    if (rc == 0) rc = d.send_hello(cookie, fds, count, &why);
  }
  return rc;
}

// What the library does for a connection of a dialled Dialer: the hello (naming the TCP
// socket by its cookie, with `count` descriptors) before the SYN, then the connect, then
// the `where` (unless `where` is false). The connected socket, or -1.
inline int handshake_connect(fastsock::shm::Dialer& d, const Endpoint& dst, const int* fds,
                             int count, int family = 0, bool where = true) {
  const int fd = tcp_socket(dst, family);
  const char* why = nullptr;
  if (fd < 0 || d.send_hello(fastsock::shm::socket_cookie(fd), fds, count, &why) != 0 ||
      tcp_connect_fd(fd, dst, family) < 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  if (where && d.send_where(local_of(fd), &why) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Listener::match for the accepted socket `fd`, as the library calls it.
inline fastsock::shm::MatchResult match_accepted(fastsock::shm::Listener& l, int fd) {
  return l.match(peer_of(fd), local_of(fd));
}


// A bare record as a fake or hostile listener would publish it: a listening SOCK_SEQPACKET
// socket and the datagram presence socket dialers look for, both under the name `a`.
// Returns the record (-1 on failure); the presence socket goes to `presence`.
inline int bind_fake_record(const sockaddr_un& a, socklen_t len, int backlog, int& presence) {
  const int rec = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  presence = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (bind(rec, reinterpret_cast<const sockaddr*>(&a), len) != 0 || listen(rec, backlog) != 0 ||
      bind(presence, reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    close(rec);
    close(presence);
    return -1;
  }
  return rec;
}

// Closes the channels this process keeps between handshakes (before counting descriptors).
inline void forget_channels() { fastsock::shm::channels::close_all(); }

// Dialer keeps one probe socket per thread, made on the first dial: made here, so that a
// test counting descriptors before and after is not off by one. Channels kept idle from
// earlier tests are closed (and forget_channels() before counting again).
inline void warm_dialer() {
  fastsock::shm::Dialer d;
  dial(d, ep("127.0.0.1", 1));
  forget_channels();
}

inline bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

// An eventfd's counter, waiting at most `timeout_ms` for it (0 on timeout or error).
inline uint64_t read_counter(int efd, int timeout_ms) {
  uint64_t value = 0;
  if (!readable(efd, timeout_ms) || read(efd, &value, sizeof value) != sizeof value) return 0;
  return value;
}

// Open descriptors of this process (the directory's own descriptor is counted every time).
inline int count_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

// Runs `fn` in a forked child that exits with its return value (killed by SIGALRM after a
// minute at most, so a broken test cannot leave it behind).
template <typename Fn>
pid_t spawn(Fn fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    _exit(fn());
  }
  return pid;
}

// The child's exit status, or 1000 + signal.
inline int wait_exit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

// Whether IPv6 loopback can be used here (a test that needs it skips otherwise).
inline bool ipv6_loopback_up() {
  TcpServer s;
  return tcp_listen(s, "::1");
}

// A non-loopback address of this host of `family`, port 0; family 0 if it has none. For
// IPv6, `link_local` picks a link-local address (and sets `scope_id` to its interface),
// else a global or site one.
inline Endpoint local_address(int family, bool link_local = false, uint32_t* scope_id = nullptr) {
  Endpoint found{};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i && found.family == 0; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP)) continue;
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    Endpoint e = fastsock::endpoint_from(i->ifa_addr, len);
    e.port = 0;
    if (family == AF_INET && e.addr[0] == 127) continue;
    if (family == AF_INET6) {
      const auto* a = reinterpret_cast<const in6_addr*>(e.addr);
      if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_V4MAPPED(a) ||
          bool(IN6_IS_ADDR_LINKLOCAL(a)) != link_local)
        continue;
      if (scope_id) *scope_id = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_scope_id;
    }
    found = e;
  }
  freeifaddrs(list);
  return found;
}

// Whether an interface of this host (in this namespace) has the address of `e`.
inline bool host_has_address(const Endpoint& e) {
  bool found = false;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != e.family) continue;
    const socklen_t len = e.family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const Endpoint a = fastsock::endpoint_from(i->ifa_addr, len);
    found = memcmp(a.addr, e.addr, sizeof a.addr) == 0;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace rvtest
