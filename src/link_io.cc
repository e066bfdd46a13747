#include "link_io.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>

#include "real.hpp"

namespace fastsock::link_io {

bool nonblocking(int fd, int flags) noexcept {
  if (flags & MSG_DONTWAIT) return true;
  const int fl = real().fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

bool socket_deadline(int fd, int option, int64_t& deadline) noexcept {
  timeval tv{};
  socklen_t len = sizeof tv;
  if (real().getsockopt(fd, SOL_SOCKET, option, &tv, &len) != 0) return false;
  if (tv.tv_sec == 0 && tv.tv_usec == 0) return false;
  deadline = now_ns() + int64_t(tv.tv_sec) * 1'000'000'000 + int64_t(tv.tv_usec) * 1000;
  return true;
}

ssize_t kernel_recv(int fd, const iovec* iov, int iovcnt, int flags) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = size_t(iovcnt);
  const ssize_t n = real().recvmsg(fd, &m, flags);
  return n < 0 ? -errno : n;
}

ssize_t kernel_send(int fd, const iovec* iov, int iovcnt, int flags) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = size_t(iovcnt);
  const ssize_t n = real().sendmsg(fd, &m, flags);
  return n < 0 ? -errno : n;
}

}  // namespace fastsock::link_io
