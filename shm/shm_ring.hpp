// The byte ring of one direction: single producer, single consumer, in a Segment.
//
// Direction d carries the bytes side d sends (side 0 = connector, 1 = acceptor): side d
// holds the RingProducer of direction d and the RingConsumer of direction 1 - d.
//
// Protocol (docs/shm.md):
// - `tail` (producer line) and `head` (consumer line) count bytes ever written and consumed,
//   as 64-bit numbers that never wrap in practice; a byte's place in the ring is its counter
//   modulo the current window (a power of two). tail - head is the fill level, <= window.
// - Each end keeps its own counter privately and only publishes it: the producer never
//   re-reads `tail`, the consumer never re-reads `head`. The only shared values an end
//   reads are the other end's counter, the window (consumer) and the flags.
// - Memory ordering: the producer copies the bytes, then stores `tail` with release; the
//   consumer loads `tail` with acquire, then reads the bytes. Symmetrically the consumer
//   stores `head` with release after it has copied bytes out, and the producer loads it with
//   acquire before overwriting that space. The producer re-reads `head` only when the head
//   it saw last leaves too little room, so small writes do not pull the consumer's line.
//   `fin` is stored with release after the last
//   `tail` store, so a consumer that loads `fin` (acquire) before `tail` sees the final tail.
// - The window grows (doubles, up to max_window) when a write does not fit: the connection
//   streams. Bytes already in the ring stay where they are: from the tail at that moment
//   (`grown_at`) on, bytes are placed modulo the new window, those before it modulo the
//   previous one. Until the consumer has taken every byte placed with the previous window
//   (head >= grown_at), the producer keeps the fill level within the previous window: a new
//   byte c and an old byte x then satisfy 0 < c - x < previous window, so c mod window (a
//   multiple of the previous window) never lands on x mod previous window. Only then can it
//   grow again; the window never shrinks. Geometry changes are published seqlock-style
//   (shm_layout.hpp) before the `tail` release of the first byte placed with them.
// - Untrusted values: a counter moving backwards, a fill level above the window, a window
//   that is not a power of two in [kMinWindow, max_window], a window that shrinks, or a
//   geometry that does not settle puts the end in a sticky corrupt() state: every call then
//   returns 0 and the caller tears the connection down. No access ever leaves the ring's
//   max_window bytes, whatever the shared memory holds.
//
// No call blocks, loops on shared values or makes a system call except write() when the
// window grows (madvise to prefault the new pages).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "shm_segment.hpp"

namespace fastsock::shm {

// Where a ring's bytes are: see "window grows" above.
struct RingGeometry {
  uint32_t window = 0;    // modulus of the bytes from grown_at on
  uint32_t previous = 0;  // modulus of the bytes before grown_at
  uint64_t grown_at = 0;
  uint32_t modulus(uint64_t counter) const { return counter < grown_at ? previous : window; }
};

class RingProducer {
 public:
  RingProducer() = default;
  // The producer end of direction `dir` (0 or 1) of an attached or created segment, which
  // must outlive this object. Reads the current tail and window once (validated). The
  // window grows up to `grow_cap` (this process's FASTSOCK_SHM_RING_MAX) or the segment's
  // max_window, whichever is smaller; a window already larger (an inherited ring) stays.
  RingProducer(const Segment& segment, int dir, uint32_t grow_cap = UINT32_MAX);

  // Copies up to `max` bytes gathered from iov into the ring; returns the number copied,
  // 0 when the ring is full (or after close_write, or when corrupt). Never blocks.
  size_t write(const iovec* iov, int iovcnt, size_t max);
  // Free bytes in the current window (0 when corrupt).
  size_t writable();
  // FIN: the consumer sees end-of-stream after the bytes written so far.
  void close_write();
  // The consumer has called close_read(): further bytes will never be read.
  bool read_closed() const;
  bool corrupt() const { return corrupt_; }

  uint32_t window() const { return geo_.window; }
  // Whether the ring has room, from shared values only (no private state is read or
  // changed, so another thread may ask while the producer's owner writes): a hint.
  bool room_hint() const;
  // At least half of what the ring can hold now is free (the window, or the previous one
  // until the consumer has taken the bytes placed with it).
  bool half_free() {
    const size_t free_bytes = writable();
    return !corrupt_ && free_bytes * 2 >= capacity(head_seen_);
  }
  // The consumer's head as the last writable() or half_free() validated it: whether the
  // consumer takes bytes at all.
  uint64_t head_seen() const { return head_seen_; }
  // Ring bytes written so far (the private tail).
  uint64_t written() const { return tail_; }
  // The ring bytes from `counter` (one of the last window() written) on, as far as they are
  // contiguous in the ring, up to `max`: a pointer and the length in `len` (0 if `counter`
  // is not such a byte). For resending what the consumer did not take.
  const unsigned char* bytes_at(uint64_t counter, size_t max, size_t& len) const;

 private:
  bool load_head(uint64_t& head);
  // Bytes the ring may hold while the consumer's head is `head`.
  uint64_t capacity(uint64_t head) const {
    return head < geo_.grown_at ? geo_.previous : geo_.window;
  }
  void grow(uint64_t needed);
  void publish_geometry(const RingGeometry& g);

  const Segment* segment_ = nullptr;
  ProducerLine* producer_ = nullptr;
  const ConsumerLine* consumer_ = nullptr;
  unsigned char* data_ = nullptr;
  int dir_ = 0;
  uint32_t max_window_ = 0;  // the segment's: what a valid geometry may say
  uint32_t grow_cap_ = 0;    // how far this end grows the window
  RingGeometry geo_;
  uint64_t tail_ = 0;
  uint64_t head_seen_ = 0;  // last validated head: free space is at least capacity - (tail - it)
  bool closed_ = false;
  bool corrupt_ = true;  // a default-constructed end is unusable
};

class RingConsumer {
 public:
  RingConsumer() = default;
  // The consumer end of direction `dir` of a segment that must outlive this object.
  RingConsumer(const Segment& segment, int dir);

  // Copies up to `max` bytes into iov (scatter) and returns the number copied; with `peek`
  // the bytes stay in the ring. 0 when empty (see eof()) or corrupt.
  size_t read(const iovec* iov, int iovcnt, size_t max, bool peek);
  // Bytes available now (0 when corrupt).
  size_t readable();
  // The producer has closed its end (FIN). Call it before readable() to conclude EOF:
  // eof() does both in that order.
  bool fin() const;
  bool eof();
  // Whether bytes or the FIN are there, from shared values only (see room_hint): a hint.
  bool data_hint() const;
  // Tell the producer nothing more will be read (shutdown(SHUT_RD), close).
  void close_read();
  bool corrupt() const { return corrupt_; }

  // Ring bytes consumed so far (the private head).
  uint64_t head() const { return head_; }
  // Stream bytes consumed on shm in this direction: ring bytes plus handoff bytes. Published
  // in the consumer line (`consumed`) for the downgrade protocol.
  uint64_t consumed() const { return consumed_; }
  // For the handoff receiver: count `n` bytes it delivered outside the ring.
  void add_consumed(uint64_t n);
  // Marks the end corrupt (the handoff receiver found the direction inconsistent).
  void set_corrupt() { corrupt_ = true; }
  // Validated tail as of now (for the handoff receiver's position checks); false if corrupt.
  bool load_tail(uint64_t& tail);

 private:
  const ProducerLine* producer_ = nullptr;
  ConsumerLine* consumer_ = nullptr;
  const unsigned char* data_ = nullptr;
  uint32_t max_window_ = 0;
  RingGeometry geo_;
  uint64_t head_ = 0;
  uint64_t consumed_ = 0;
  bool corrupt_ = true;
};

}  // namespace fastsock::shm
