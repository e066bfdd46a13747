// Notifier (shm_notify.hpp).
#include "shm_notify.hpp"

#include <sched.h>

#include <atomic>

#include "shm_sys.hpp"

namespace fastsock::shm {

Notifier::Notifier(const Segment& segment, int side, int own_eventfd, int peer_eventfd)
    : own_(&segment.layout()->side[side & 1]),
      peer_(&segment.layout()->side[(side & 1) ^ 1]),
      own_fd_(own_eventfd),
      peer_fd_(peer_eventfd) {}

void Notifier::arm_for_data() {
  own_->arm_data.fetch_or(kArmOnce, std::memory_order_seq_cst);
  // Orders the flag before the caller's re-check of the ring (pairs with the publisher's
  // fence between its counter store and its flag load).
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Notifier::arm_for_space() {
  own_->arm_space.fetch_or(kArmOnce, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

namespace {

// The CPU hint of the caller's CPU (0: unknown), stored in `line` when it changed.
uint32_t note_cpu(SideLine& line) {
  const int cpu = sched_getcpu();  // glibc reads it from rseq: no system call
  if (cpu < 0) return 0;
  const uint32_t mine = uint32_t(cpu) + 1;
  if (line.cpu.load(std::memory_order_relaxed) != mine) line.cpu.store(mine, std::memory_order_relaxed);
  return mine;
}

}  // namespace

bool Notifier::peer_on_my_cpu() {
  const uint32_t mine = note_cpu(*own_);
  return mine != 0 && peer_->cpu.load(std::memory_order_relaxed) == mine;
}

void Notifier::note_my_cpu() { (void)note_cpu(*own_); }

uint64_t Notifier::drain() {
  uint64_t count = 0;
  if (sys::read(own_fd_, &count, sizeof count) != long(sizeof count)) count = 0;
  // After the read: a publisher that finds `pending` still set skips its write, but its
  // bytes were published before that, so the caller's next check (after this store) sees them.
  own_->pending.store(0, std::memory_order_seq_cst);
  return count;
}

uint64_t Notifier::drain_if_signalled() {
  if (own_->pending.load(std::memory_order_seq_cst) == 0) return 0;
  return drain();
}

bool Notifier::signal_if_armed(std::atomic<uint32_t>& flag) {
  // Orders our counter store (release) before the flag load: see the waiter's protocol.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if ((flag.load(std::memory_order_relaxed) & kArmOnce) == 0) return false;  // fast path: no syscall
  if ((flag.fetch_and(~kArmOnce, std::memory_order_acq_rel) & kArmOnce) == 0) return false;
  if (peer_->pending.exchange(1, std::memory_order_seq_cst) != 0) return false;
  const uint64_t one = 1;
  if (sys::write(peer_fd_, &one, sizeof one) != long(sizeof one)) {
    // Nothing was signalled: let the next publish try again.
    peer_->pending.store(0, std::memory_order_relaxed);
    return false;
  }
  ++signals_sent_;
  return true;
}

bool Notifier::data_published() { return own_ && signal_if_armed(peer_->arm_data); }
bool Notifier::space_freed() { return own_ && signal_if_armed(peer_->arm_space); }

}  // namespace fastsock::shm
