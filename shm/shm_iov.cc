#include "shm_iov.hpp"

#include <cstring>

namespace fastsock::shm {

size_t iov_total(const iovec* iov, int iovcnt, size_t max) {
  size_t total = 0;
  for (int i = 0; iov && i < iovcnt && total < max; ++i) {
    size_t len = iov[i].iov_len;
    total += len < max - total ? len : max - total;
  }
  return total;
}

}  // namespace fastsock::shm
