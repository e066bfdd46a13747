#include "net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fastsock_pipe {
namespace {

// Like NPtcp: no Nagle delay, or small ping-pong messages would measure the delayed-ACK timer.
void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

int listen_tcp(const char* bind_addr, int port, int* bound_port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::perror("fastsock-pipe: socket");
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 1) != 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot listen on port %d: %s\n", port, std::strerror(errno));
    close(fd);
    return -1;
  }
  socklen_t len = sizeof sa;
  if (bound_port && getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
    *bound_port = ntohs(sa.sin_port);
  return fd;
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

int connect_tcp(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    std::fprintf(stderr, "fastsock-pipe: %s: %s\n", host.c_str(), gai_strerror(rc));
    return -1;
  }
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot connect to %s port %d: %s\n", host.c_str(), port,
                 std::strerror(err));
    return -1;
  }
  set_nodelay(fd);
  return fd;
}

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
