// What a link that carries a TCP socket's data itself (shm::Conn, verbs::Conn) asks of the
// kernel socket under it: the blocking mode and timeouts the application set on it, which
// the kernel keeps, and the kernel's own I/O for the bytes that still travel over TCP.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "socket_mode.hpp"

namespace fastsock::link_io {

// CLOCK_MONOTONIC in nanoseconds. Inline, with iov_total: both run in the data path.
inline int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// How a thread's recent waits ended, which sizes its next spin budget (SpinBudget).
// Spinning pays only while what a wait waits for comes within the budget: a thread whose
// waits keep lasting longer (its peer answers later than that, as a server at a moderate
// request rate does) burnt the whole budget for nothing each time, doubling a server's CPU
// time at 10,000 requests/s (docs/configuration.md, FASTSOCK_SPIN_ADAPT). So once
// kPatience waits in a row outlasted the full budget, each further one halves the thread's
// next budgets, down to 1/16; a wait that ended within the full budget (found while
// spinning, or soon after a reduced spin ran out) brings the full budget back; and every
// kProbeEvery-th wait of a thread so reduced spins in full, in case a wake-up's own latency
// hid that the event came within the budget. (Halving at every spin that ran out kept
// streams reduced: a writer waiting for room, whose waits are around the budget, then had
// budgets too short for its usual waits, and slept: shm bandwidth across CPUs fell from
// 14-26 to 10 GB/s. The patience keeps the full budget for waits that are only sometimes
// longer.) A link's waits to write (for room in a ring, for credits, for a handoff to be
// taken) always spin in full and teach nothing: their reader is at work, and they are the
// stream's pace (a sender's waits for a 4 MiB handoff, longer than any budget, reduced
// its history and were suspected in a 4 GB/s run against 12-18 for fixed spins).
struct SpinHistory {
  static constexpr unsigned kMaxShift = 4;
  static constexpr unsigned kProbeEvery = 16;
  static constexpr unsigned kPatience = 4;
  unsigned shift = 0;  // budgets are divided by 2^shift
  unsigned waits = 0;  // waits while reduced, for the probes
  unsigned over = 0;   // waits in a row that outlasted the full budget (up to kPatience)
};
// The calling thread's, or nullptr when FASTSOCK_SPIN_ADAPT is off (every budget in full).
SpinHistory* thread_spin_history() noexcept;

// A busy-wait budget of `us` microseconds (0: none), sized by `history` (nullptr: always
// the full budget) and noted in it when the object goes: so it must live until the wait
// ends, sleep included (the time from its first clock reading to its end tells whether
// the full budget would have found the event). The clock is read once per
// kClockStride checks, not at every check, and first after kClockStride checks, so a wait
// answered within them reads no clock at all: where clock_gettime is a system call (a clock
// source without a vDSO read: HPET, as in the Soft-RoCE VM, where a read takes 1 us; Xen's;
// some other hypervisors') a read per check made each check that long and delayed noticing
// the event. The budget runs over by at most 2 * kClockStride checks.
class SpinBudget {
 public:
  static constexpr unsigned kClockStride = 16;
  // For a wait with a `timeout` (nullptr: none): the budget is cut to it, so that a call
  // with a shorter timeout than the budget still returns on time (to within a stride).
  explicit SpinBudget(uint32_t us, const timespec* timeout = nullptr,
                      SpinHistory* history = thread_spin_history()) noexcept
      : budget_ns_(int64_t(us) * 1000), full_ns_(budget_ns_), history_(history) {
    if (history_ && history_->shift != 0 &&
        ++history_->waits % SpinHistory::kProbeEvery != 0)
      budget_ns_ >>= history_->shift;
    if (timeout)
      budget_ns_ = std::clamp<int64_t>(
          (timeout->tv_sec * 1'000'000'000 + timeout->tv_nsec) / 1000 * 1000, 0, budget_ns_);
  }
  SpinBudget(const SpinBudget&) = delete;
  SpinBudget& operator=(const SpinBudget&) = delete;
  ~SpinBudget() {
    if (!history_ || checks_ == 0) return;  // no spin: nothing learnt
    // Ran out: one more clock reading, after a sleep (which cost more).
    if (!ran_out_ || now_ns() - (end_ - spun_ns_) <= full_ns_) {
      history_->shift = 0;
      history_->over = 0;
    } else if (history_->over < SpinHistory::kPatience) {
      ++history_->over;
    } else if (history_->shift < SpinHistory::kMaxShift) {
      ++history_->shift;
    }
  }
  // Whether to check once more.
  bool more() noexcept {
    if (budget_ns_ == 0) return false;
    if (++checks_ % kClockStride != 0) return true;
    const int64_t now = now_ns();
    if (end_ == 0) {
      end_ = now + budget_ns_;
      spun_ns_ = budget_ns_;
    }
    if (now < end_) return true;
    budget_ns_ = 0;
    ran_out_ = true;
    return false;
  }

 private:
  int64_t budget_ns_;
  int64_t full_ns_;      // the budget before the history's reduction
  int64_t spun_ns_ = 0;  // the budget from the first clock reading (end_ - spun_ns_)
  int64_t end_ = 0;
  unsigned checks_ = 0;
  bool ran_out_ = false;
  SpinHistory* history_;
};

// The bytes an iovec array covers.
inline size_t iov_total(const iovec* iov, int iovcnt) noexcept {
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  return total;
}

// Whether a call on socket `fd` must not block: MSG_DONTWAIT in `flags`, or the socket's
// O_NONBLOCK (from `mode`, or asked of the kernel without one: then call it only when the
// call would block).
bool nonblocking(int fd, int flags, SocketMode* mode = nullptr) noexcept;

// The socket's SO_RCVTIMEO or SO_SNDTIMEO (`option`) as an absolute now_ns() deadline in
// `deadline`; false when there is none.
bool socket_deadline(int fd, int option, int64_t& deadline, SocketMode* mode = nullptr) noexcept;

// One call's SO_RCVTIMEO or SO_SNDTIMEO deadline, asked of the kernel the first time the
// call is about to sleep: a call whose data comes while it spins makes no system call for
// it (the timeout then runs from that first sleep, at most a spin budget late).
class Deadline {
 public:
  explicit Deadline(int option, SocketMode* mode = nullptr) noexcept
      : option_(option), mode_(mode) {}
  // poll()'s timeout in milliseconds until the deadline: -1 without one, 0 once it passed.
  int poll_ms(int fd) noexcept;
  // Whether the socket has a timeout and it passed.
  bool passed(int fd) noexcept { return has(fd) && now_ns() >= at_; }

 private:
  bool has(int fd) noexcept {
    if (!known_) {
      has_ = socket_deadline(fd, option_, at_, mode_);
      known_ = true;
    }
    return has_;
  }
  int option_;
  SocketMode* mode_;
  bool known_ = false, has_ = false;
  int64_t at_ = 0;
};

// recvmsg / sendmsg of `iov` on the kernel socket, through the real libc entry points.
// Bytes moved or -errno. Not noexcept: both are cancellation points, and pthread_cancel
// unwinds through them (src/ops.hpp).
ssize_t kernel_recv(int fd, const iovec* iov, int iovcnt, int flags);
ssize_t kernel_send(int fd, const iovec* iov, int iovcnt, int flags);

}  // namespace fastsock::link_io
