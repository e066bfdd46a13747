#include "net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fastsock_pipe {
namespace {

// Like NPtcp: no Nagle delay, or small ping-pong messages would measure the delayed-ACK
// timer. Harmless (ENOTSUP/EOPNOTSUPP) on a Unix socket, so the result is not checked.
void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A TCP socket with close-on-exec set afterwards, not by SOCK_CLOEXEC in its type: rsocket's
// preload library only takes sockets whose type is exactly SOCK_STREAM, and would leave one
// created with flags on kernel TCP unnoticed. Close-on-exec is best effort (a preload
// library may not support F_SETFD); it only keeps --compare's workers from inheriting it.
int tcp_socket(int family) {
  int fd = socket(family, SOCK_STREAM, 0);
  if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

// NPtcp -b: fixed buffers instead of the kernel's autotuning, whose growth differs from run
// to run and makes large-message times bimodal. Set before listen/connect, so the window
// scale negotiated in the handshake fits them. The kernel caps them at net.core.*mem_max.
bool set_socket_buffers(int fd, int bytes) {
  if (bytes <= 0) return true;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0) {
    std::perror("fastsock-pipe: setsockopt SO_SNDBUF/SO_RCVBUF");
    return false;
  }
  return true;
}

bool unix_address(const std::string& path, sockaddr_un& sun) {
  sun = {};
  sun.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sun.sun_path) {
    std::fprintf(stderr, "fastsock-pipe: Unix socket path '%s' is empty or longer than %zu bytes\n",
                 path.c_str(), sizeof sun.sun_path - 1);
    return false;
  }
  std::memcpy(sun.sun_path, path.c_str(), path.size() + 1);
  return true;
}

int listen_unix(const std::string& path) {
  sockaddr_un sun;
  if (!unix_address(path, sun)) return -1;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::perror("fastsock-pipe: socket");
    return -1;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&sun), sizeof sun) != 0 || listen(fd, 1) != 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot listen on unix:%s: %s\n", path.c_str(),
                 std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

int listen_inet(const Address& a, int* bound_port) {
  const bool v6 = a.family == Family::inet6;
  int fd = tcp_socket(v6 ? AF_INET6 : AF_INET);
  if (fd < 0) {
    std::perror("fastsock-pipe: socket");
    return -1;
  }
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!set_socket_buffers(fd, a.socket_buffer)) {
    close(fd);
    return -1;
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  bool parsed = true;
  if (v6) {
    // Listening on :: accepts IPv4 peers too (mapped addresses), as a receiver should.
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(static_cast<uint16_t>(a.port));
    s6->sin6_addr = in6addr_any;
    if (!a.host.empty()) parsed = inet_pton(AF_INET6, a.host.c_str(), &s6->sin6_addr) == 1;
    len = sizeof *s6;
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(static_cast<uint16_t>(a.port));
    s4->sin_addr.s_addr = htonl(INADDR_ANY);
    if (!a.host.empty()) parsed = inet_pton(AF_INET, a.host.c_str(), &s4->sin_addr) == 1;
    len = sizeof *s4;
  }
  if (!parsed) {
    std::fprintf(stderr, "fastsock-pipe: cannot listen on '%s': not a numeric IPv%d address\n",
                 a.host.c_str(), v6 ? 6 : 4);
    close(fd);
    return -1;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 1) != 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot listen on %s: %s\n", a.describe().c_str(),
                 std::strerror(errno));
    close(fd);
    return -1;
  }
  if (bound_port && getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    *bound_port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

int connect_unix(const std::string& path) {
  sockaddr_un sun;
  if (!unix_address(path, sun)) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::perror("fastsock-pipe: socket");
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof sun) != 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot connect to unix:%s: %s\n", path.c_str(),
                 std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

int connect_inet(const Address& a) {
  addrinfo hints{};
  hints.ai_family = a.family == Family::inet6 ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(a.port);
  int rc = getaddrinfo(a.host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    std::fprintf(stderr, "fastsock-pipe: %s: %s\n", a.host.c_str(), gai_strerror(rc));
    return -1;
  }
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = tcp_socket(ai->ai_family);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (!set_socket_buffers(fd, a.socket_buffer)) {
      close(fd);
      freeaddrinfo(res);
      return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot connect to %s port %d: %s\n", a.host.c_str(),
                 a.port, std::strerror(err));
    return -1;
  }
  set_nodelay(fd);
  return fd;
}

}  // namespace

std::string Address::describe() const {
  if (family == Family::unix_stream) return "unix:" + path;
  std::string h = host.empty() ? (family == Family::inet6 ? "::" : "0.0.0.0") : host;
  return h + " port " + std::to_string(port);
}

int listen_on(const Address& a, int* bound_port) {
  return a.family == Family::unix_stream ? listen_unix(a.path) : listen_inet(a, bound_port);
}

int connect_to(const Address& a) {
  return a.family == Family::unix_stream ? connect_unix(a.path) : connect_inet(a);
}

int accept_one(int listen_fd) {
  int fd;
  do {
    fd = accept(listen_fd, nullptr, nullptr);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    std::perror("fastsock-pipe: accept");
    return -1;
  }
  set_nodelay(fd);
  return fd;
}

void shutdown_both(int fd) { shutdown(fd, SHUT_RDWR); }

bool send_all(int fd, const void* buf, std::size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::perror("fastsock-pipe: send");
      return false;
    }
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

bool recv_all(int fd, void* buf, std::size_t len) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::perror("fastsock-pipe: recv");
      return false;
    }
    if (n == 0) {
      std::fprintf(stderr, "fastsock-pipe: peer closed the connection\n");
      return false;
    }
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace fastsock_pipe
