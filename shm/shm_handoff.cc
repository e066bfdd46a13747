// Handoff sender and receiver (shm_handoff.hpp).
#include "shm_handoff.hpp"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "shm_iov.hpp"

namespace fastsock::shm {

namespace {

constexpr int kMaxLocalIov = 64;  // pieces of the reader's iovec per process_vm_readv
// A cross-process copy commits its progress after each chunk of this size: the sender sees
// the reader working (its patience restarts on progress, shm_conn.cc), and a cancel that
// races the copy wastes one chunk at most, not a whole multi-megabyte message. Large
// enough that the per-chunk process_vm_readv and CAS cost nothing measurable.
constexpr size_t kCopyChunk = size_t{1} << 20;

bool known_state(HandoffState s) { return uint8_t(s) <= uint8_t(HandoffState::busy); }

}  // namespace

// ---- sender ----

HandoffSender::HandoffSender(const Segment& segment, int dir)
    : segment_(&segment),
      slot_(&segment.layout()->dir[dir & 1].handoff),
      corrupt_(false),
      seq_(handoff_seq(slot_->ctl.load(std::memory_order_relaxed))) {}

bool HandoffSender::post(const RingProducer& ring, const void* buf, size_t len) {
  if (corrupt_ || refused_ || outstanding_ || len == 0 || len > kMaxHandoffLength) return false;
  ++seq_;
  length_ = len;
  same_process_ = segment_->peer_in_this_process();
  // Orders the previous post's terminal ctl before these field stores, for the
  // receiver's seqlock check.
  std::atomic_thread_fence(std::memory_order_release);
  slot_->pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  slot_->address.store(reinterpret_cast<uintptr_t>(buf), std::memory_order_relaxed);
  slot_->length.store(len, std::memory_order_relaxed);
  slot_->position.store(ring.written(), std::memory_order_relaxed);
  slot_->ctl.store(handoff_ctl(HandoffState::posted, seq_, 0), std::memory_order_release);
  outstanding_ = true;
  return true;
}

bool HandoffSender::load(uint64_t& ctl) {
  ctl = slot_->ctl.load(std::memory_order_acquire);
  HandoffState s = handoff_state(ctl);
  bool ok = handoff_seq(ctl) == seq_ && handoff_progress(ctl) <= length_ && known_state(s) &&
            s != HandoffState::idle && s != HandoffState::cancelled &&
            (s != HandoffState::busy || same_process_) &&
            (s != HandoffState::done || handoff_progress(ctl) == length_);
  if (!ok) corrupt_ = true;
  return ok;
}

bool HandoffSender::done() {
  uint64_t ctl;
  if (!outstanding_ || corrupt_ || !load(ctl)) return true;
  HandoffState s = handoff_state(ctl);
  return s == HandoffState::done || s == HandoffState::refused;
}

uint64_t HandoffSender::progress() {
  uint64_t ctl;
  if (!outstanding_ || corrupt_ || !load(ctl)) return 0;
  return handoff_progress(ctl);
}

size_t HandoffSender::finish() {
  if (!outstanding_) return 0;
  outstanding_ = false;
  for (;;) {
    uint64_t ctl;
    if (corrupt_ || !load(ctl)) return 0;
    const uint64_t progress = handoff_progress(ctl);
    switch (handoff_state(ctl)) {
      case HandoffState::done:
        return length_;
      case HandoffState::refused:
        refused_ = true;
        return progress;
      case HandoffState::busy:
        // Same process only (load() checked): the reader is inside one memcpy.
        sched_yield();
        break;
      default:  // posted: withdraw it; fails only if the reader committed meanwhile
        if (slot_->ctl.compare_exchange_strong(
                ctl, handoff_ctl(HandoffState::cancelled, seq_, progress), std::memory_order_acq_rel))
          return progress;
        break;
    }
  }
}

// ---- receiver ----

HandoffReceiver::HandoffReceiver(const Segment& segment, int dir)
    : segment_(&segment), slot_(&segment.layout()->dir[dir & 1].handoff) {
  // Whatever the slot holds is history, except a post nobody has read from yet: the
  // producer may have posted before this end was set up, and that post is ours to read.
  const uint64_t ctl = slot_->ctl.load(std::memory_order_acquire);
  seq_ = handoff_seq(ctl);
  if (handoff_state(ctl) == HandoffState::posted && handoff_progress(ctl) == 0) --seq_;
}

bool HandoffReceiver::load(RingConsumer& ring, Live& live) {
  live = Live{};
  if (ring.corrupt()) return false;
  const uint64_t ctl = slot_->ctl.load(std::memory_order_acquire);
  const HandoffState s = handoff_state(ctl);
  const uint64_t progress = handoff_progress(ctl);
  bool ok = known_state(s);
  if (ok && handoff_seq(ctl) != seq_) {
    // A post we have not seen. Only the producer's two states can be new, with nothing
    // delivered yet; a cancelled one simply never reached us.
    ok = (s == HandoffState::posted || s == HandoffState::cancelled) && progress == 0;
    if (ok && s == HandoffState::posted) {
      const int32_t pid = slot_->pid.load(std::memory_order_relaxed);
      const uint64_t address = slot_->address.load(std::memory_order_relaxed);
      const uint64_t length = slot_->length.load(std::memory_order_relaxed);
      const uint64_t position = slot_->position.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      // Changed under us: a legitimate producer only cancels a post (then the ring carries
      // the rest), so reading the ring without a limit this once is right; a new post is
      // picked up by the next call.
      if (slot_->ctl.load(std::memory_order_relaxed) != ctl) return true;
      uint64_t tail;
      ok = pid > 0 && length >= 1 && length <= kMaxHandoffLength && address <= ~length &&
           position >= ring.head() && ring.load_tail(tail) && position <= tail;
      if (ok) {
        pid_ = pid;
        address_ = address;
        length_ = length;
        position_ = position;
      }
    }
    if (ok) {
      seq_ = handoff_seq(ctl);
      progress_ = 0;
      finished_ = s != HandoffState::posted;
    }
  } else if (ok) {
    // The post we know: only the producer may have moved it, from posted to cancelled,
    // and the progress is what we delivered.
    if (finished_)
      ok = s != HandoffState::posted && s != HandoffState::busy;
    else
      ok = (s == HandoffState::posted || s == HandoffState::cancelled) && progress == progress_;
    if (ok && !finished_ && s == HandoffState::cancelled) finished_ = true;
  }
  if (!ok) {
    ring.set_corrupt();
    return false;
  }
  if (!finished_) {
    live.posted = true;
    live.ctl = ctl;
    live.position = position_;
    live.remaining = length_ - progress_;
  }
  return true;
}

size_t HandoffReceiver::read(RingConsumer& ring, const iovec* iov, int iovcnt, size_t max, bool peek) {
  Live live;
  if (!load(ring, live)) return 0;
  if (!live.posted) return ring.read(iov, iovcnt, max, peek);
  const uint64_t before = live.position - ring.head();
  size_t n = ring.read(iov, iovcnt, before < max ? size_t(before) : max, peek);
  if (ring.corrupt() || n != before || n >= max) return n;
  return n + copy_from_peer(live, iov, iovcnt, n, max - n, peek, ring);
}

size_t HandoffReceiver::readable(RingConsumer& ring) {
  Live live;
  if (!load(ring, live)) return 0;
  size_t in_ring = ring.readable();
  if (!live.posted || ring.corrupt()) return in_ring;
  // The ring holds at least the bytes before the position (checked when posted).
  uint64_t total = (live.position - ring.head()) + live.remaining;
  return total > SIZE_MAX ? SIZE_MAX : size_t(total);
}

size_t HandoffReceiver::copy_from_peer(const Live& live, const iovec* iov, int iovcnt, size_t skip,
                                       size_t max, bool peek, RingConsumer& ring) {
  IovCursor cursor(iov, iovcnt);
  cursor.advance(skip);
  iovec local[kMaxLocalIov];
  size_t covered = 0;
  const uint64_t want = live.remaining < max ? live.remaining : max;
  int count = cursor.slice(size_t(want), local, kMaxLocalIov, &covered);
  if (covered == 0) return 0;
  size_t n = 0;

  if (segment_->peer_in_this_process() && pid_ == ::getpid()) {
    // One process: hold the slot busy while copying, so that a cancelling sender waits and
    // its buffer is not released under the memcpy.
    uint64_t expected = live.ctl;
    if (!slot_->ctl.compare_exchange_strong(expected, handoff_ctl(HandoffState::busy, seq_, progress_),
                                            std::memory_order_acq_rel))
      return 0;  // cancelled meanwhile: the next read sees it
    const auto* from = reinterpret_cast<const unsigned char*>(uintptr_t(address_ + progress_));
    for (int i = 0; i < count; ++i) {
      std::memcpy(local[i].iov_base, from + n, local[i].iov_len);
      n += local[i].iov_len;
    }
    const uint64_t next = peek ? progress_ : progress_ + n;
    const HandoffState s = next == length_ ? HandoffState::done : HandoffState::posted;
    slot_->ctl.store(handoff_ctl(s, seq_, next), std::memory_order_release);
    if (peek) return n;
    progress_ += n;
    if (progress_ == length_) finished_ = true;
    ring.add_consumed(n);
    return n;
  }

  if (peek) {
    const ssize_t r = read_peer(local, count, address_ + progress_, covered, live.ctl);
    if (r <= 0) return 0;
    // The copy counts only if the post was still live after it (not cancelled and reused).
    std::atomic_thread_fence(std::memory_order_acquire);
    return slot_->ctl.load(std::memory_order_relaxed) == live.ctl ? size_t(r) : 0;
  }
  uint64_t expected = live.ctl;
  while (n < covered) {
    size_t piece = 0;
    count = cursor.slice(std::min(covered - n, kCopyChunk), local, kMaxLocalIov, &piece);
    const ssize_t r = read_peer(local, count, address_ + progress_, piece, expected);
    if (r <= 0) break;  // refused: read_peer recorded it
    const uint64_t next = progress_ + uint64_t(r);
    const HandoffState s = next == length_ ? HandoffState::done : HandoffState::posted;
    const uint64_t committed = handoff_ctl(s, seq_, next);
    if (!slot_->ctl.compare_exchange_strong(expected, committed, std::memory_order_acq_rel))
      break;  // cancelled while we copied: those bytes go by the ring
    expected = committed;
    progress_ = next;
    n += size_t(r);
    cursor.advance(size_t(r));
    ring.add_consumed(size_t(r));
    if (progress_ == length_) finished_ = true;
    if (size_t(r) < piece) break;  // a short read: the rest on the next call
  }
  return n;
}

ssize_t HandoffReceiver::read_peer(const iovec* local, int count, uint64_t source, size_t len,
                                   uint64_t ctl) {
  iovec remote{reinterpret_cast<void*>(uintptr_t(source)), len};
  const ssize_t r = ::process_vm_readv(pid_, local, static_cast<unsigned long>(count), &remote, 1, 0);
  if (r > 0) return r;
  // EPERM (ptrace policy), ESRCH, EFAULT...: the producer sends the rest by the ring.
  last_error_ = r < 0 ? errno : EFAULT;
  refused_ = true;
  uint64_t expected = ctl;
  slot_->ctl.compare_exchange_strong(expected, handoff_ctl(HandoffState::refused, seq_, progress_),
                                     std::memory_order_acq_rel);
  finished_ = true;  // refused by us or cancelled by the producer: either way, over
  return r < 0 ? r : -1;
}

bool HandoffReceiver::posted_hint() const {
  if (!slot_) return false;
  const HandoffState st = handoff_state(slot_->ctl.load(std::memory_order_acquire));
  return st == HandoffState::posted;
}

}  // namespace fastsock::shm
