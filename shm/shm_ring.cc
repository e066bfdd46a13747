// Ring producer and consumer (shm_ring.hpp).
#include "shm_ring.hpp"

#include <algorithm>
#include <cstring>

#include "shm_iov.hpp"

namespace fastsock::shm {

namespace {

bool valid_window(uint32_t w, uint32_t max_window) {
  return w >= kMinWindow && w <= max_window && (w & (w - 1)) == 0;
}

// The geometry word (shm_layout.hpp) as of a tail `tail`; false if it is not a legal one.
bool decode_geometry(uint64_t word, uint64_t tail, uint32_t max_window, RingGeometry& g) {
  const uint32_t w_log = uint32_t(word & 31), p_log = uint32_t((word >> 5) & 31);
  if (w_log > 26 - 12 || p_log > w_log) return false;
  g.window = uint32_t{1} << (w_log + 12);
  g.previous = uint32_t{1} << (p_log + 12);
  const uint64_t low = word >> kGeometryCounterShift;
  // The largest counter <= tail with these low bits.
  g.grown_at = (tail & ~kGeometryCounterMask) | low;
  if (g.grown_at > tail) g.grown_at -= kGeometryCounterMask + 1;
  return valid_window(g.window, max_window) && valid_window(g.previous, max_window);
}

// A run of ring bytes as at most four contiguous pieces: it splits where the modulus wraps
// and, for the consumer, at grown_at.
struct Pieces {
  size_t pos[4] = {};
  size_t len[4] = {};
  int n = 0;
};

void add_run(Pieces& p, uint64_t counter, size_t n, uint32_t modulus) {
  if (n == 0) return;
  const size_t pos = static_cast<size_t>(counter & (modulus - 1));
  const size_t first = n < modulus - pos ? n : modulus - pos;
  p.pos[p.n] = pos;
  p.len[p.n++] = first;
  if (n > first) {
    p.pos[p.n] = 0;
    p.len[p.n++] = n - first;
  }
}

// Where ring bytes [counter, counter + n) are (n <= the modulus of each part, validated).
Pieces pieces(const RingGeometry& g, uint64_t counter, size_t n) {
  Pieces p;
  const size_t old = counter < g.grown_at ? size_t(std::min<uint64_t>(n, g.grown_at - counter)) : 0;
  add_run(p, counter, old, g.previous);
  add_run(p, counter + old, n - old, g.window);
  return p;
}

// Copies n bytes from the caller's iovecs into the ring's pieces / out of them. One iovec
// (the common send/recv case) is copied directly; arrays go through an IovCursor.
void copy_in(unsigned char* ring, const Pieces& p, const iovec* iov, int iovcnt) {
  if (iovcnt == 1) {
    const auto* src = static_cast<const unsigned char*>(iov[0].iov_base);
    for (int i = 0; i < p.n; src += p.len[i], ++i) std::memcpy(ring + p.pos[i], src, p.len[i]);
    return;
  }
  IovCursor in(iov, iovcnt);
  for (int i = 0; i < p.n; ++i) in.gather(ring + p.pos[i], p.len[i]);
}

void copy_out(const unsigned char* ring, const Pieces& p, const iovec* iov, int iovcnt) {
  if (iovcnt == 1) {
    auto* dst = static_cast<unsigned char*>(iov[0].iov_base);
    for (int i = 0; i < p.n; dst += p.len[i], ++i) std::memcpy(dst, ring + p.pos[i], p.len[i]);
    return;
  }
  IovCursor out(iov, iovcnt);
  for (int i = 0; i < p.n; ++i) out.scatter(ring + p.pos[i], p.len[i]);
}

// How far a stream may get past its last growth before the producer forgets the previous
// window (it must stay below 2^54 for the geometry word; any large value works).
constexpr uint64_t kCollapseDistance = uint64_t{1} << 40;

}  // namespace

// ---- producer ----

RingProducer::RingProducer(const Segment& segment, int dir, uint32_t grow_cap)
    : segment_(&segment),
      producer_(&segment.layout()->dir[dir & 1].producer),
      consumer_(&segment.layout()->dir[dir & 1].consumer),
      data_(segment.ring_data(dir & 1)),
      dir_(dir & 1),
      max_window_(segment.limits().max_window),
      grow_cap_(grow_cap < max_window_ ? grow_cap : max_window_) {
  // A fresh segment holds tail 0 and the initial window; an inherited one whatever its
  // producer left, which is checked like any other shared value.
  tail_ = producer_->tail.load(std::memory_order_relaxed);
  closed_ = producer_->fin.load(std::memory_order_relaxed) != 0;
  corrupt_ = !decode_geometry(producer_->geometry.load(std::memory_order_relaxed), tail_,
                              max_window_, geo_);
  uint64_t head;
  if (!corrupt_) corrupt_ = !load_head(head);
}

bool RingProducer::load_head(uint64_t& head) {
  head = consumer_->head.load(std::memory_order_acquire);
  if (head > tail_ || tail_ - head > capacity(head)) {
    corrupt_ = true;
    return false;
  }
  head_seen_ = head;
  return true;
}

void RingProducer::publish_geometry(const RingGeometry& g) {
  geo_ = g;
  // Relaxed: published by the release store of the tail that follows the first byte
  // placed with it (a reader that sees the word earlier finds it consistent on its own).
  producer_->geometry.store(encode_geometry(g.window, g.previous, g.grown_at),
                            std::memory_order_relaxed);
}

void RingProducer::grow(uint64_t needed) {
  uint32_t target = geo_.window * 2;
  while (target < needed && target < grow_cap_) target *= 2;
  if (target > grow_cap_) target = grow_cap_;
  // Allocate the new pages first; without memory the ring keeps its window.
  if (segment_->prefault(dir_, geo_.window, target - geo_.window) != 0) return;
  publish_geometry(RingGeometry{target, geo_.window, tail_});
}

size_t RingProducer::write(const iovec* iov, int iovcnt, size_t max) {
  if (corrupt_ || closed_) return 0;
  const size_t want = iov_total(iov, iovcnt, max);
  if (want == 0) return 0;
  // The head seen last time is a lower bound of the real one: while it leaves room, the
  // consumer's line is not touched (one cache-line transfer less per small write).
  uint64_t head = head_seen_;
  if (capacity(head) - (tail_ - head) < want) {
    if (!load_head(head)) return 0;
    // A write that does not fit: the connection streams, its window grows (at most one
    // growth pending: bytes placed with an older window must be gone first).
    if (capacity(head) - (tail_ - head) < want && geo_.window < grow_cap_ &&
        head >= geo_.grown_at)
      grow(want + (tail_ - head));
    if (geo_.previous != geo_.window && head >= geo_.grown_at &&
        tail_ - geo_.grown_at >= kCollapseDistance)
      publish_geometry(RingGeometry{geo_.window, geo_.window, tail_});
  }
  const size_t free_bytes = static_cast<size_t>(capacity(head) - (tail_ - head));
  const size_t n = want < free_bytes ? want : free_bytes;
  if (n == 0) return 0;
  Pieces p;
  add_run(p, tail_, n, geo_.window);  // every new byte is at or after grown_at
  copy_in(data_, p, iov, iovcnt);
  tail_ += n;
  producer_->tail.store(tail_, std::memory_order_release);
  return n;
}

size_t RingProducer::writable() {
  uint64_t head;
  if (corrupt_ || closed_ || !load_head(head)) return 0;
  return static_cast<size_t>(capacity(head) - (tail_ - head));
}

const unsigned char* RingProducer::bytes_at(uint64_t counter, size_t max, size_t& len) const {
  len = 0;
  if (corrupt_ || counter >= tail_ || tail_ - counter > geo_.window) return nullptr;
  const uint32_t modulus = geo_.modulus(counter);
  const size_t pos = static_cast<size_t>(counter & (modulus - 1));
  const uint64_t end = counter < geo_.grown_at ? std::min(tail_, geo_.grown_at) : tail_;
  len = static_cast<size_t>(std::min<uint64_t>({max, end - counter, modulus - pos}));
  return data_ + pos;
}

bool RingProducer::room_hint() const {
  if (!producer_) return false;
  const uint64_t tail = producer_->tail.load(std::memory_order_relaxed);
  const uint64_t head = consumer_->head.load(std::memory_order_acquire);
  RingGeometry g;
  if (head > tail || !decode_geometry(producer_->geometry.load(std::memory_order_relaxed), tail,
                                      max_window_, g))
    return false;
  return tail - head < (head < g.grown_at ? g.previous : g.window);
}

void RingProducer::close_write() {
  if (!producer_) return;
  closed_ = true;
  producer_->fin.store(1, std::memory_order_release);
}

bool RingProducer::read_closed() const {
  return consumer_ && consumer_->read_closed.load(std::memory_order_acquire) != 0;
}

// ---- consumer ----

RingConsumer::RingConsumer(const Segment& segment, int dir)
    : producer_(&segment.layout()->dir[dir & 1].producer),
      consumer_(&segment.layout()->dir[dir & 1].consumer),
      data_(segment.ring_data(dir & 1)),
      max_window_(segment.limits().max_window) {
  head_ = consumer_->head.load(std::memory_order_relaxed);
  consumed_ = consumer_->consumed.load(std::memory_order_relaxed);
  corrupt_ = false;
  uint64_t tail;
  load_tail(tail);
}

bool RingConsumer::load_tail(uint64_t& tail) {
  if (corrupt_) return false;
  tail = producer_->tail.load(std::memory_order_acquire);
  // Loaded after the tail: the geometry every byte up to `tail` was placed with, or a newer
  // one, which places the bytes before its grown_at (hence all of ours) with its previous
  // window, the one they were placed with (shm_ring.hpp).
  RingGeometry g;
  bool ok = tail >= head_ &&
            decode_geometry(producer_->geometry.load(std::memory_order_acquire), tail,
                            max_window_, g) &&
            tail - head_ <= g.window && g.window >= geo_.window;
  if (!ok) {
    corrupt_ = true;
    return false;
  }
  geo_ = g;
  return true;
}

size_t RingConsumer::read(const iovec* iov, int iovcnt, size_t max, bool peek) {
  uint64_t tail;
  if (!load_tail(tail)) return 0;
  size_t avail = static_cast<size_t>(tail - head_);
  size_t n = iov_total(iov, iovcnt, avail < max ? avail : max);
  if (n == 0) return 0;
  copy_out(data_, pieces(geo_, head_, n), iov, iovcnt);
  if (!peek) {
    head_ += n;
    consumer_->head.store(head_, std::memory_order_release);
    add_consumed(n);
  }
  return n;
}

size_t RingConsumer::readable() {
  uint64_t tail;
  if (!load_tail(tail)) return 0;
  return static_cast<size_t>(tail - head_);
}

bool RingConsumer::fin() const {
  return producer_ && producer_->fin.load(std::memory_order_acquire) != 0;
}

bool RingConsumer::eof() { return fin() && readable() == 0 && !corrupt_; }

bool RingConsumer::data_hint() const {
  if (!producer_) return false;
  return producer_->tail.load(std::memory_order_acquire) !=
             consumer_->head.load(std::memory_order_relaxed) ||
         producer_->fin.load(std::memory_order_acquire) != 0;
}

void RingConsumer::close_read() {
  if (consumer_) consumer_->read_closed.store(1, std::memory_order_release);
}

void RingConsumer::add_consumed(uint64_t n) {
  consumed_ += n;
  consumer_->consumed.store(consumed_, std::memory_order_release);
}

}  // namespace fastsock::shm
