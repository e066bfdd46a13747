#include "iov_cursor.hpp"

#include <cstring>

namespace fastsock {

size_t IovCursor::gather(void* dst, size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n && index_ < count_) {
    size_t left = iov_[index_].iov_len - offset_;
    size_t k = left < n - done ? left : n - done;
    if (k) std::memcpy(out + done, static_cast<const unsigned char*>(iov_[index_].iov_base) + offset_, k);
    done += k;
    advance(k);
  }
  return done;
}

size_t IovCursor::scatter(const void* src, size_t n) {
  const auto* in = static_cast<const unsigned char*>(src);
  size_t done = 0;
  while (done < n && index_ < count_) {
    size_t left = iov_[index_].iov_len - offset_;
    size_t k = left < n - done ? left : n - done;
    if (k) std::memcpy(static_cast<unsigned char*>(iov_[index_].iov_base) + offset_, in + done, k);
    done += k;
    advance(k);
  }
  return done;
}

int IovCursor::slice(size_t n, iovec* out, int out_max, size_t* covered) const {
  int used = 0;
  size_t done = 0;
  size_t off = offset_;
  for (int i = index_; i < count_ && used < out_max && done < n; ++i, off = 0) {
    size_t left = iov_[i].iov_len - off;
    size_t k = left < n - done ? left : n - done;
    if (k == 0) continue;
    out[used].iov_base = static_cast<unsigned char*>(iov_[i].iov_base) + off;
    out[used].iov_len = k;
    ++used;
    done += k;
  }
  *covered = done;
  return used;
}

void IovCursor::advance(size_t n) {
  while (index_ < count_) {
    size_t left = iov_[index_].iov_len - offset_;
    if (n < left) {
      offset_ += n;
      return;
    }
    n -= left;
    ++index_;
    offset_ = 0;
    if (n == 0) {
      // Skip empty entries so that index_ points at the next byte.
      while (index_ < count_ && iov_[index_].iov_len == 0) ++index_;
      return;
    }
  }
}

}  // namespace fastsock
