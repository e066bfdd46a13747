// The fields of one direction that the switch and downgrade protocols use (design §3).
// The protocol itself lives in src/; these are plain accessors with the ordering each needs.
//
// - switch_offset (producer line): how many bytes the producer sent on TCP before its first
//   shm byte. The producer sets it once, before its first ring write or handoff post; the
//   consumer reads TCP up to that offset, then the ring. kNoSwitchOffset until set.
// - consumed (consumer line, maintained by RingConsumer/HandoffReceiver): stream bytes the
//   consumer took from shm. Stream offset consumed = switch_offset + consumed, which is where
//   a downgrade resumes on TCP.
// - state (control line): active / downgrade requested / dead, written by either end.
// - lock words, one per role, reserved for processes that share one end after fork.
//
// Every value read here comes from the peer and is untrusted: the getters validate what
// can be validated and the caller treats a failed check as a broken connection.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm_segment.hpp"

namespace fastsock::shm {

class Control {
 public:
  Control() = default;
  // Direction `dir` of a segment that must outlive this object.
  Control(const Segment& segment, int dir)
      : dir_(&segment.layout()->dir[dir & 1]), marks_(&segment.layout()->marks[dir & 1]) {}

  // Producer: publishes the switch offset (release). Call once, before the first shm byte.
  void set_switch_offset(uint64_t tcp_bytes) {
    dir_->producer.switch_offset.store(tcp_bytes, std::memory_order_release);
  }
  // Consumer: false while the producer has not switched (the sentinel).
  bool switch_offset(uint64_t& tcp_bytes) const {
    tcp_bytes = dir_->producer.switch_offset.load(std::memory_order_acquire);
    return tcp_bytes != kNoSwitchOffset;
  }

  // Producer: how many shm bytes the consumer says it consumed; false (value unusable) if
  // it claims more than `produced`, the shm bytes the producer has sent in all (ring
  // bytes written plus handoff bytes delivered).
  bool peer_consumed(uint64_t produced, uint64_t& consumed) const {
    consumed = dir_->consumer.consumed.load(std::memory_order_acquire);
    return consumed <= produced;
  }

  // Producer: the shm stream bytes [start, end) are a typed send of element `type`
  // (1..255; TypeMarks in shm_layout.hpp). The caller writes those bytes only afterwards.
  void mark_typed(uint64_t start, uint64_t end, uint8_t type) {
    const uint32_t seq = marks_->seq.load(std::memory_order_relaxed) & ~1u;  // we write it
    marks_->seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    TypeMark& m = marks_->mark[(seq / 2) % kTypeMarks];
    m.start.store(start, std::memory_order_relaxed);
    m.end.store(end, std::memory_order_relaxed);
    m.type.store(type, std::memory_order_relaxed);
    marks_->seq.store(seq + 2, std::memory_order_release);
  }
  // Consumer: whether a typed mark of another type than `type` covers part of the shm
  // stream bytes [from, to). False when it cannot tell (the producer is writing a mark).
  bool typed_conflict(uint64_t from, uint64_t to, uint8_t type) const {
    const uint32_t seq = marks_->seq.load(std::memory_order_acquire);
    if (seq & 1) return false;
    bool conflict = false;
    for (const TypeMark& m : marks_->mark) {
      const uint32_t t = m.type.load(std::memory_order_relaxed);
      if (t != 0 && t != type && m.start.load(std::memory_order_relaxed) < to &&
          m.end.load(std::memory_order_relaxed) > from)
        conflict = true;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return conflict && marks_->seq.load(std::memory_order_relaxed) == seq;
  }

  // Either end. An unknown value reads as `dead`.
  DirectionState state() const {
    uint32_t v = dir_->control.state.load(std::memory_order_acquire);
    return v <= kMaxDirectionState ? DirectionState(v) : DirectionState::dead;
  }
  void set_state(DirectionState s) {
    dir_->control.state.store(uint32_t(s), std::memory_order_release);
  }
  // Leaving the ring, from either end (design §3, downgrade by offsets): the first to
  // leave sets its state; the other end sees it and does its part. Both return the state
  // found when the direction was not active any more (the CAS failed), else `active`.
  // Consumer: active -> downgrade_requested (the producer resends what was not consumed).
  DirectionState request_downgrade() { return leave(DirectionState::downgrade_requested); }
  // Producer: active -> tcp_resumed (the consumer empties the ring, then reads TCP).
  DirectionState resume_on_tcp() { return leave(DirectionState::tcp_resumed); }

  // Reserved for the fork work: one lock word per role of this direction, 0 when unlocked.
  std::atomic<uint32_t>& producer_lock() const { return dir_->producer.lock; }
  std::atomic<uint32_t>& consumer_lock() const { return dir_->consumer.lock; }

 private:
  DirectionState leave(DirectionState to) {
    uint32_t expected = uint32_t(DirectionState::active);
    if (dir_->control.state.compare_exchange_strong(expected, uint32_t(to),
                                                    std::memory_order_acq_rel))
      return DirectionState::active;
    return expected <= kMaxDirectionState ? DirectionState(expected) : DirectionState::dead;
  }

  Direction* dir_ = nullptr;
  TypeMarks* marks_ = nullptr;
};

}  // namespace fastsock::shm
