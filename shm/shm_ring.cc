// Ring producer and consumer (shm_ring.hpp).
#include "shm_ring.hpp"

#include <cstring>

#include "shm_iov.hpp"

namespace fastsock::shm {

namespace {

bool valid_window(uint32_t w, uint32_t max_window) {
  return w >= kMinWindow && w <= max_window && (w & (w - 1)) == 0;
}

// The ring's bytes [counter, counter + n) modulo `window` as at most two spans.
struct Spans {
  size_t first_pos, first_len, second_len;
};
Spans spans(uint64_t counter, size_t n, uint32_t window) {
  size_t pos = static_cast<size_t>(counter & (window - 1));
  size_t first = n < window - pos ? n : window - pos;
  return Spans{pos, first, n - first};
}

// Copies n bytes from the caller's iovecs into the ring's spans / out of them. One iovec
// (the common send/recv case) is copied directly; arrays go through an IovCursor.
void copy_in(unsigned char* ring, const Spans& s, const iovec* iov, int iovcnt) {
  if (iovcnt == 1) {
    const auto* src = static_cast<const unsigned char*>(iov[0].iov_base);
    std::memcpy(ring + s.first_pos, src, s.first_len);
    if (s.second_len) std::memcpy(ring, src + s.first_len, s.second_len);
    return;
  }
  IovCursor in(iov, iovcnt);
  in.gather(ring + s.first_pos, s.first_len);
  if (s.second_len) in.gather(ring, s.second_len);
}

void copy_out(const unsigned char* ring, const Spans& s, const iovec* iov, int iovcnt) {
  if (iovcnt == 1) {
    auto* dst = static_cast<unsigned char*>(iov[0].iov_base);
    std::memcpy(dst, ring + s.first_pos, s.first_len);
    if (s.second_len) std::memcpy(dst + s.first_len, ring, s.second_len);
    return;
  }
  IovCursor out(iov, iovcnt);
  out.scatter(ring + s.first_pos, s.first_len);
  if (s.second_len) out.scatter(ring, s.second_len);
}

}  // namespace

// ---- producer ----

RingProducer::RingProducer(const Segment& segment, int dir)
    : segment_(&segment),
      producer_(&segment.layout()->dir[dir & 1].producer),
      consumer_(&segment.layout()->dir[dir & 1].consumer),
      data_(segment.ring_data(dir & 1)),
      dir_(dir & 1),
      max_window_(segment.limits().max_window) {
  // A fresh segment holds tail 0 and the initial window; an inherited one whatever its
  // producer left, which is checked like any other shared value.
  tail_ = producer_->tail.load(std::memory_order_relaxed);
  window_ = producer_->window.load(std::memory_order_relaxed);
  closed_ = producer_->fin.load(std::memory_order_relaxed) != 0;
  uint64_t head;
  corrupt_ = !valid_window(window_, max_window_);
  if (!corrupt_) corrupt_ = !load_head(head);
}

bool RingProducer::load_head(uint64_t& head) {
  head = consumer_->head.load(std::memory_order_acquire);
  if (head > tail_ || tail_ - head > window_) {
    corrupt_ = true;
    return false;
  }
  head_seen_ = head;
  return true;
}

void RingProducer::maybe_grow(size_t want) {
  uint32_t target = window_;
  if (grow_wanted_) target = window_ * 2;
  while (target < want && target < max_window_) target *= 2;
  if (target > max_window_) target = max_window_;
  grow_wanted_ = false;  // asked again by the next write that does not fit
  if (target <= window_) return;
  // Allocate the new pages first; without memory the ring keeps its window.
  if (segment_->prefault(dir_, window_, target - window_) != 0) return;
  window_ = target;
  // Relaxed: published by the release store of the tail that follows the first byte.
  producer_->window.store(window_, std::memory_order_relaxed);
}

size_t RingProducer::write(const iovec* iov, int iovcnt, size_t max) {
  if (corrupt_ || closed_) return 0;
  const size_t want = iov_total(iov, iovcnt, max);
  if (want == 0) return 0;
  // The head seen last time is a lower bound of the real one: while it leaves room, the
  // consumer's line is not touched (one cache-line transfer less per small write).
  uint64_t head = head_seen_;
  if (window_ - (tail_ - head) < want || grow_wanted_) {
    if (!load_head(head)) return 0;
    if (head == tail_ && window_ < max_window_ && (grow_wanted_ || want > window_)) maybe_grow(want);
  }
  const size_t free_bytes = window_ - static_cast<size_t>(tail_ - head);
  const size_t n = want < free_bytes ? want : free_bytes;
  // A write that does not fit marks the connection as streaming: grow when next empty.
  if (n < want && window_ < max_window_) grow_wanted_ = true;
  if (n == 0) return 0;
  copy_in(data_, spans(tail_, n, window_), iov, iovcnt);
  tail_ += n;
  producer_->tail.store(tail_, std::memory_order_release);
  return n;
}

size_t RingProducer::writable() {
  uint64_t head;
  if (corrupt_ || closed_ || !load_head(head)) return 0;
  return window_ - static_cast<size_t>(tail_ - head);
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
  seen_tail_ = head_;
  window_ = producer_->window.load(std::memory_order_relaxed);
  corrupt_ = !valid_window(window_, max_window_);
  uint64_t tail;
  if (!corrupt_) load_tail(tail);
}

bool RingConsumer::load_tail(uint64_t& tail) {
  if (corrupt_) return false;
  tail = producer_->tail.load(std::memory_order_acquire);
  // Loaded after the tail: at least as new as the window the bytes up to `tail` were
  // placed with (the producer changes it only when the ring is empty).
  uint32_t w = producer_->window.load(std::memory_order_relaxed);
  bool ok = tail >= head_ && valid_window(w, max_window_) && tail - head_ <= w;
  // The producer changes the window only when it sees the ring empty, which means we had
  // consumed every byte it had published, hence every byte we had seen.
  if (ok && w != window_) ok = head_ == seen_tail_;
  if (!ok) {
    corrupt_ = true;
    return false;
  }
  window_ = w;
  seen_tail_ = tail;
  return true;
}

size_t RingConsumer::read(const iovec* iov, int iovcnt, size_t max, bool peek) {
  uint64_t tail;
  if (!load_tail(tail)) return 0;
  size_t avail = static_cast<size_t>(tail - head_);
  size_t n = iov_total(iov, iovcnt, avail < max ? avail : max);
  if (n == 0) return 0;
  copy_out(data_, spans(head_, n, window_), iov, iovcnt);
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

void RingConsumer::close_read() {
  if (consumer_) consumer_->read_closed.store(1, std::memory_order_release);
}

void RingConsumer::add_consumed(uint64_t n) {
  consumed_ += n;
  consumer_->consumed.store(consumed_, std::memory_order_release);
}

}  // namespace fastsock::shm
