// Handoff with pointer passing: a large message crosses without being copied into the ring.
//
// The producer posts a descriptor (its pid, the buffer's address and length, and the ring
// position the bytes follow) in the direction's HandoffSlot instead of copying the bytes.
// The consumer reads the ring up to that position, then copies straight out of the
// producer's buffer into its own iovec with process_vm_readv (one copy, no ring), or with
// memcpy when both ends live in this process, in as many partial reads as its buffers take.
// The producer's blocking send waits (the caller does the waiting, see done()) until every
// byte was taken, then returns; its buffer stays untouched by the library meanwhile.
//
// Slot protocol (`ctl` packs state, 16-bit sequence and 40-bit progress, shm_layout.hpp):
//
//   producer: fields, then ctl = {posted, seq+1, 0} (release)
//   consumer: loads ctl (acquire), copies bytes [progress, progress + k) from the buffer,
//             then CAS ctl {posted, seq, p} -> {posted or done, seq, p + k}
//   producer: finish(): if not done, CAS {posted, seq, p} -> {cancelled, seq, p}; the
//             consumer's next CAS fails and it drops what it copied: bytes [0, p) were
//             delivered, the caller sends [p, len) some other way (the ring).
//   consumer: process_vm_readv fails (EPERM: ptrace policy, ...) -> CAS to {refused, seq, p};
//             the producer sends [p, len) through the ring and never posts again.
//
// A cross-process consumer copies optimistically (the CAS decides whether its copy counts),
// so the producer never waits for the consumer to finish a copy. When both ends are in one
// process the consumer first moves the slot to `busy` and memcpy's, and a cancelling
// producer waits for that copy to end: a buffer freed after the send returns is then never
// read. That mode needs Segment::set_peer_in_this_process(true) on BOTH ends' Segment
// objects, and is used only when the descriptor's pid is the reader's own.
//
// The consumer validates every descriptor (length 1..kMaxHandoffLength, no address
// overflow, position between its head and the ring's tail, progress equal to what it
// delivered itself, sequence moving forward); the producer validates the consumer's
// replies. A violation makes the direction corrupt (RingConsumer::corrupt() /
// HandoffSender::corrupt()): the caller tears the connection down. A hostile producer
// can at most make process_vm_readv read its own memory or fail; a memcpy is never done on
// an address from shared memory unless both ends are this process.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "shm_ring.hpp"
#include "shm_segment.hpp"

namespace fastsock::shm {

inline constexpr uint64_t kMaxHandoffLength = (uint64_t{1} << 40) - 1;

enum class HandoffState : uint8_t {
  idle = 0,       // nothing posted yet in this direction
  posted = 1,     // live: the consumer may copy
  done = 2,       // the consumer took all `length` bytes
  refused = 3,    // the consumer cannot read the producer's memory (progress = bytes taken)
  cancelled = 4,  // the producer withdrew it (progress = bytes taken)
  busy = 5,       // same-process consumer is memcpy'ing (see above)
};

// Packing of HandoffSlot::ctl.
inline constexpr uint64_t handoff_ctl(HandoffState s, uint16_t seq, uint64_t progress) {
  return uint64_t(s) | (uint64_t(seq) << 8) | (progress << 24);
}
inline constexpr HandoffState handoff_state(uint64_t ctl) { return HandoffState(ctl & 0xff); }
inline constexpr uint16_t handoff_seq(uint64_t ctl) { return uint16_t(ctl >> 8); }
inline constexpr uint64_t handoff_progress(uint64_t ctl) { return ctl >> 24; }

class HandoffSender {
 public:
  HandoffSender() = default;
  // The producer end of direction `dir`; the segment must outlive it.
  HandoffSender(const Segment& segment, int dir);

  // Posts buf[0, len) as the stream bytes that follow everything written to `ring` so far.
  // The caller must not write to the ring again before finish(). Returns false, posting
  // nothing, when a post is outstanding, len is 0 or above kMaxHandoffLength, or the peer
  // refused a handoff before (refused()) or the slot is corrupt. Then notify the peer
  // (Notifier::data_published), and wait for done() (arm_for_space: the consumer signals
  // space when it takes bytes).
  bool post(const RingProducer& ring, const void* buf, size_t len);
  bool outstanding() const { return outstanding_; }

  // True when finish() needs no cancel: the consumer took every byte, or refused, or the
  // slot is corrupt. Also true when nothing is outstanding.
  bool done();
  // Bytes of the outstanding post the consumer has taken so far (it commits them a chunk
  // at a time), for a caller that waits only as long as the consumer makes progress.
  uint64_t progress();
  // Ends the outstanding post and returns how many of its bytes the consumer took. If it
  // was still live it is cancelled first (the consumer takes nothing more once this
  // returns): the caller sends the rest, buf[result, len), through the ring, or returns
  // a partial count. 0 when nothing was outstanding.
  size_t finish();

  // The consumer could not read our memory (ptrace policy): post() will refuse from now on.
  bool refused() const { return refused_; }
  // The consumer's replies were inconsistent; the connection must be torn down.
  bool corrupt() const { return corrupt_; }

 private:
  // Loads and checks ctl; returns false (and sets corrupt_) if it is not a reply to our post.
  bool load(uint64_t& ctl);

  const Segment* segment_ = nullptr;
  HandoffSlot* slot_ = nullptr;
  bool same_process_ = false;  // of the outstanding post (the reader may then be busy)
  bool outstanding_ = false;
  bool refused_ = false;
  bool corrupt_ = true;  // a default-constructed end is unusable
  uint16_t seq_ = 0;
  uint64_t length_ = 0;
};

class HandoffReceiver {
 public:
  HandoffReceiver() = default;
  // The consumer end of direction `dir`; the segment must outlive it.
  HandoffReceiver(const Segment& segment, int dir);

  // Reads the direction's stream: ring bytes up to a posted handoff's position, then that
  // handoff's bytes straight from the producer's memory. Use it instead of
  // RingConsumer::read (same arguments and meaning) whenever the peer may post handoffs.
  // Returns 0 when nothing is available or the direction is corrupt (ring.corrupt()).
  size_t read(RingConsumer& ring, const iovec* iov, int iovcnt, size_t max, bool peek);
  // Bytes read() could return now (ring bytes plus a live handoff's remaining bytes).
  size_t readable(RingConsumer& ring);

  // process_vm_readv failed here (errno in last_error()); the slot was marked refused.
  // Whether a post is live now, from the shared slot only: a hint (see RingConsumer::data_hint).
  bool posted_hint() const;
  bool refused() const { return refused_; }
  int last_error() const { return last_error_; }
  // Part of a post was delivered and the rest not yet: only this object knows how much
  // (a new receiver built on the segment would take the post for history).
  bool mid_post() const { return !finished_ && progress_ > 0; }

 private:
  struct Live {
    bool posted = false;
    uint64_t ctl = 0;
    uint64_t position = 0;
    uint64_t remaining = 0;
  };
  // The live descriptor, validated against the ring; false if corrupt (ring marked).
  bool load(RingConsumer& ring, Live& live);
  size_t copy_from_peer(const Live& live, const iovec* iov, int iovcnt, size_t skip,
                        size_t max, bool peek, RingConsumer& ring);
  // One process_vm_readv of `len` bytes at `source` in the producer into `local`. On failure
  // marks the post (last seen as `ctl`) refused and returns <= 0.
  ssize_t read_peer(const iovec* local, int count, uint64_t source, size_t len, uint64_t ctl);

  const Segment* segment_ = nullptr;
  HandoffSlot* slot_ = nullptr;
  // Private copy of the descriptor of sequence seq_, taken when it was first seen.
  uint16_t seq_ = 0;
  bool finished_ = true;   // seq_ reached a terminal state (or none seen yet)
  uint64_t progress_ = 0;  // bytes of seq_ this end delivered
  pid_t pid_ = 0;
  uint64_t address_ = 0;
  uint64_t length_ = 0;
  uint64_t position_ = 0;
  bool refused_ = false;
  int last_error_ = 0;
};

}  // namespace fastsock::shm
