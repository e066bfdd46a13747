#include "socket_mode.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>

#include "real.hpp"

namespace fastsock {

uint64_t SocketMode::tag() const noexcept {
  // Never 0, the tag of an entry not asked yet.
  return (uint64_t(epoch_.load(std::memory_order_acquire) % 0xFFFF) + 1) << kValueBits;
}

template <typename Ask>
uint64_t SocketMode::cached(std::atomic<uint64_t>& entry, Ask ask) noexcept {
  const uint64_t tag = this->tag();
  const uint64_t e = entry.load(std::memory_order_acquire);
  if ((e & ~kValueMask) == tag) return e & kValueMask;
  uint64_t value;
  if (!ask(value)) return 0;  // not kept: the next call asks again
  entry.store(tag | std::min(value, kValueMask), std::memory_order_release);
  return std::min(value, kValueMask);
}

bool SocketMode::nonblocking(int fd) noexcept {
  return cached(nonblock_, [fd](uint64_t& v) {
    const int fl = real().fcntl(fd, F_GETFL);
    if (fl < 0) return false;
    v = (fl & O_NONBLOCK) ? 1 : 0;
    return true;
  });
}

uint64_t SocketMode::timeout_us(int fd, int option) noexcept {
  return cached(option == SO_RCVTIMEO ? rcvtimeo_ : sndtimeo_, [fd, option](uint64_t& v) {
    timeval tv{};
    socklen_t len = sizeof tv;
    if (real().getsockopt(fd, SOL_SOCKET, option, &tv, &len) != 0) return false;
    v = uint64_t(tv.tv_sec) * 1'000'000 + uint64_t(tv.tv_usec);
    return true;
  });
}

int SocketMode::close_on_exec(int fd) noexcept {
  const uint64_t mine = uint64_t(fd) << 1;
  const uint64_t tag = this->tag();
  const uint64_t e = cloexec_.load(std::memory_order_acquire);
  if ((e & ~kValueMask) == tag && (e & kValueMask & ~uint64_t(1)) == mine) return int(e & 1);
  const int flags = real().fcntl(fd, F_GETFD);
  if (flags < 0) return -1;
  const int on = (flags & FD_CLOEXEC) ? 1 : 0;
  cloexec_.store(tag | mine | uint64_t(on), std::memory_order_release);
  return on;
}

void SocketMode::made(int fd, int type) noexcept {
  const uint64_t tag = this->tag();
  nonblock_.store(tag | ((type & SOCK_NONBLOCK) ? 1 : 0), std::memory_order_release);
  rcvtimeo_.store(tag, std::memory_order_release);
  sndtimeo_.store(tag, std::memory_order_release);
  cloexec_.store(tag | (uint64_t(fd) << 1) | ((type & SOCK_CLOEXEC) ? 1 : 0),
                 std::memory_order_release);
}

}  // namespace fastsock
