#include "endpoint.hpp"

#include <time.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "integrity.hpp"

namespace fastsock_pipe {

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Endpoint::FreeAligned::operator()(uint8_t* p) const { std::free(p); }

namespace {

// NetPIPE aligns its message buffers to 16 KiB (bufalign): page-aligned buffers copy faster
// than misaligned ones, and matching it keeps large-message times comparable with NPtcp's.
constexpr std::size_t kBufferAlign = 16 * 1024;

uint8_t* alloc_buffer(std::size_t bytes) {
  return static_cast<uint8_t*>(
      std::aligned_alloc(kBufferAlign, (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign));
}

}  // namespace

void Endpoint::prepare(std::size_t bytes, std::size_t pool_bytes, bool one_buffer) {
  // Slots start on cache-line boundaries, so typed arrays are aligned like any malloc'ed one.
  stride_ = (bytes + 63) / 64 * 64;
  if (stride_ == 0) stride_ = 64;
  slot_count_ = pool_bytes > stride_ ? (pool_bytes + stride_ - 1) / stride_ : 1;
  const std::size_t need = stride_ * slot_count_;
  if (need > capacity_) {
    // With a pool, the request is the same at every size but the slots grow with the
    // message: keep room for twice this stride, so growing sizes reallocate rarely.
    const std::size_t alloc = slot_count_ > 1 ? (pool_bytes + 63) / 64 * 64 + 2 * stride_ : need;
    uint8_t* s = alloc_buffer(alloc);
    uint8_t* r = alloc_buffer(alloc);
    if (!s || !r) {
      std::free(s);
      std::free(r);
      throw std::bad_alloc();
    }
    spool_.reset(s);
    rpool_.reset(r);
    capacity_ = alloc;
    // Touch every page and give the send buffers real data: NetPIPE notes that untouched
    // buffers measure faster than anything a real application would see. A pool is filled
    // once, here: refilling hundreds of megabytes at every size would dominate the run.
    fill_elements(spool_.get(), alloc, element);
    std::memset(rpool_.get(), 0, alloc);
  } else if (slot_count_ == 1) {
    fill_elements(spool_.get(), bytes, element);
    if (!one_buffer) std::memset(rpool_.get(), 0, bytes);  // one buffer: rpool_ goes unused
  }
  rbase_ = one_buffer && slot_count_ == 1 ? spool_.get() : rpool_.get();
  if (path == ArrayPath::portable && bytes > stage_capacity_) {
    uint8_t* s = alloc_buffer(stride_);
    uint8_t* r = alloc_buffer(stride_);
    if (!s || !r) {
      std::free(s);
      std::free(r);
      throw std::bad_alloc();
    }
    sstage_.reset(s);
    rstage_.reset(r);
    stage_capacity_ = stride_;
  }
}

bool Endpoint::send_message(std::size_t slot, std::size_t bytes, uint64_t off) {
  uint8_t* buf = send_slot(slot);
  if (integrity) fill_pattern(buf, bytes, off);
  long long flip = -1;
  if (corrupt_at >= 0 && static_cast<uint64_t>(corrupt_at) >= off &&
      static_cast<uint64_t>(corrupt_at) < off + bytes) {
    flip = corrupt_at - static_cast<long long>(off);
    buf[flip] ^= 0xff;
    corrupt_at = -1;  // once per run
  }
  bool ok = send_array_message(fd, path, element, buf, bytes, sstage_.get());
  if (flip >= 0) buf[flip] ^= 0xff;
  return ok;
}

bool Endpoint::echo_message(std::size_t slot, std::size_t bytes) {
  return send_array_message(fd, path, element, recv_slot(slot), bytes, sstage_.get());
}

bool Endpoint::recv_message(std::size_t slot, std::size_t bytes, uint64_t off) {
  uint8_t* buf = recv_slot(slot);
  if (!recv_array_message(fd, path, element, buf, bytes, rstage_.get())) return false;
  if (integrity) {
    uint64_t first = 0;
    uint64_t bad = check_pattern(buf, bytes, off, &first);
    if (bad != 0 && errors == 0) first_bad = first;
    errors += bad;
  }
  return true;
}

}  // namespace fastsock_pipe
