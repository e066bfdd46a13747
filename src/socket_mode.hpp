// The kernel socket's blocking mode (O_NONBLOCK) and timeouts (SO_RCVTIMEO, SO_SNDTIMEO),
// and one descriptor's close-on-exec flag, remembered as last asked of the kernel (or as
// socket() made them), for links that carry a connection's data themselves: a blocking
// send or receive on such a link needs them every time it would sleep, and asking the
// kernel each time costs three system calls per message (measured on the verbs link's
// ping-pong, docs/verbs.md "Latency"); a shm connection's setup needs all four once
// (docs/shm-rendezvous.md "System calls").
//
// Safe to remember because only this process uses the descriptor while a link carries it
// (every link goes back to the kernel before fork and descriptor passing; after exec the
// new image starts with nothing known), and the application changes these only through
// calls the core intercepts: fcntl(F_SETFL, F_SETFD), ioctl(FIONBIO, FIOCLEX, FIONCLEX) and
// setsockopt(SOL_SOCKET), which call forget(). A value asked of the kernel while another
// thread changed it is not kept (the epoch moved meanwhile).
#pragma once

#include <atomic>
#include <cstdint>

namespace fastsock {

class SocketMode {
 public:
  // Whether the socket is O_NONBLOCK.
  bool nonblocking(int fd) noexcept;
  // SO_RCVTIMEO or SO_SNDTIMEO (`option`) in microseconds, 0 for none.
  uint64_t timeout_us(int fd, int option) noexcept;
  // Whether descriptor `fd` (not the socket: dup'ed descriptors have their own flag) is
  // FD_CLOEXEC. -1 if the kernel could not tell.
  int close_on_exec(int fd) noexcept;
  // A socket just made by socket(`type`) on `fd`: its mode is in `type`'s flags, and a new
  // socket has no timeouts.
  void made(int fd, int type) noexcept;
  // The application may have changed them.
  void forget() noexcept { epoch_.fetch_add(1, std::memory_order_acq_rel); }
  // A new socket: nothing known.
  void reset() noexcept {
    for (auto* e : {&nonblock_, &rcvtimeo_, &sndtimeo_, &cloexec_})
      e->store(0, std::memory_order_relaxed);
  }

 private:
  // An entry packs the epoch it was asked in (+1, so 0 means never asked) into its top 16
  // bits and the value into the other 48.
  static constexpr int kValueBits = 48;
  static constexpr uint64_t kValueMask = (uint64_t(1) << kValueBits) - 1;
  uint64_t tag() const noexcept;
  template <typename Ask>
  uint64_t cached(std::atomic<uint64_t>& entry, Ask ask) noexcept;

  std::atomic<uint32_t> epoch_{0};
  // cloexec_'s value is the descriptor number shifted left by one, plus the flag.
  std::atomic<uint64_t> nonblock_{0}, rcvtimeo_{0}, sndtimeo_{0}, cloexec_{0};
};

}  // namespace fastsock
