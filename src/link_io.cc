#include "link_io.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "config_load.hpp"
#include "real.hpp"

namespace fastsock::link_io {

SpinHistory* thread_spin_history() noexcept {
  static thread_local SpinHistory history;
  return config().spin_adapt ? &history : nullptr;
}

bool nonblocking(int fd, int flags, SocketMode* mode) noexcept {
  if (flags & MSG_DONTWAIT) return true;
  if (mode) return mode->nonblocking(fd);
  const int fl = real().fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

bool socket_deadline(int fd, int option, int64_t& deadline, SocketMode* mode) noexcept {
  if (mode) {
    const uint64_t us = mode->timeout_us(fd, option);
    if (us == 0) return false;
    deadline = now_ns() + int64_t(std::min<uint64_t>(us, INT64_MAX / 4000)) * 1000;
    return true;
  }
  timeval tv{};
  socklen_t len = sizeof tv;
  if (real().getsockopt(fd, SOL_SOCKET, option, &tv, &len) != 0) return false;
  if (tv.tv_sec == 0 && tv.tv_usec == 0) return false;
  deadline = now_ns() + int64_t(tv.tv_sec) * 1'000'000'000 + int64_t(tv.tv_usec) * 1000;
  return true;
}

int Deadline::poll_ms(int fd) noexcept {
  if (!has(fd)) return -1;
  const int64_t left = at_ - now_ns();
  if (left <= 0) return 0;
  return int(std::min<int64_t>((left + 999'999) / 1'000'000, INT_MAX));
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
