// A position inside a caller's iovec array: gathers bytes out of it (producer) or scatters
// bytes into it (consumer), and trims it into a sub-array (a partial readv/writev, shm's
// process_vm_readv). Shared by the links that copy between callers' arrays and their own
// buffers (shm rings, verbs slots).
#pragma once

#include <sys/uio.h>

#include <cstddef>

namespace fastsock {

class IovCursor {
 public:
  IovCursor(const iovec* iov, int iovcnt) : iov_(iov), count_(iov ? iovcnt : 0) {}

  // Copy up to n bytes from the cursor into dst / from src into the cursor; advance.
  size_t gather(void* dst, size_t n);
  size_t scatter(const void* src, size_t n);

  // Fills `out` (at most `out_max` entries) with the next `n` bytes' pieces, without
  // advancing; returns the number of entries, and the bytes they cover in `*covered`.
  int slice(size_t n, iovec* out, int out_max, size_t* covered) const;
  void advance(size_t n);

 private:
  const iovec* iov_;
  int count_;
  int index_ = 0;
  size_t offset_ = 0;  // into iov_[index_]
};

}  // namespace fastsock
