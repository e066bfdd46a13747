// Exported hooks: connection lifecycle.
#include <sys/socket.h>

#include "hook.hpp"

using namespace fastsock;

FASTSOCK_HOOK int socket(int domain, int type, int protocol) noexcept {
  FASTSOCK_RETURN(int, ops::socket(domain, type, protocol));
}
FASTSOCK_HOOK int socketpair(int domain, int type, int protocol, int sv[2]) noexcept {
  FASTSOCK_RETURN(int, ops::socketpair(domain, type, protocol, sv));
}
FASTSOCK_HOOK int bind(int fd, const sockaddr* addr, socklen_t len) noexcept {
  FASTSOCK_RETURN(int, ops::bind(fd, addr, len));
}
FASTSOCK_HOOK int listen(int fd, int backlog) noexcept {
  FASTSOCK_RETURN(int, ops::listen(fd, backlog));
}
FASTSOCK_HOOK int accept(int fd, sockaddr* addr, socklen_t* len) {
  FASTSOCK_RETURN(int, ops::accept4(fd, addr, len, 0));
}
FASTSOCK_HOOK int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  FASTSOCK_RETURN(int, ops::accept4(fd, addr, len, flags));
}
FASTSOCK_HOOK int connect(int fd, const sockaddr* addr, socklen_t len) {
  FASTSOCK_RETURN(int, ops::connect(fd, addr, len));
}
FASTSOCK_HOOK int shutdown(int fd, int how) noexcept {
  FASTSOCK_RETURN(int, ops::shutdown(fd, how));
}
FASTSOCK_HOOK int getsockopt(int fd, int level, int name, void* value, socklen_t* len) noexcept {
  FASTSOCK_RETURN(int, ops::getsockopt(fd, level, name, value, len));
}
FASTSOCK_HOOK int setsockopt(int fd, int level, int name, const void* value,
                             socklen_t len) noexcept {
  FASTSOCK_RETURN(int, ops::setsockopt(fd, level, name, value, len));
}
FASTSOCK_HOOK int getsockname(int fd, sockaddr* addr, socklen_t* len) noexcept {
  FASTSOCK_RETURN(int, ops::getsockname(fd, addr, len));
}
FASTSOCK_HOOK int getpeername(int fd, sockaddr* addr, socklen_t* len) noexcept {
  FASTSOCK_RETURN(int, ops::getpeername(fd, addr, len));
}
