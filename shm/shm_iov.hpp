// iovec helpers of the shm link; the cursor over a caller's array is src/iov_cursor.hpp.
#pragma once

#include <sys/uio.h>

#include <cstddef>

#include "iov_cursor.hpp"

namespace fastsock::shm {

// Sum of the lengths, stopping at `max` (so a hostile or huge array cannot overflow).
size_t iov_total(const iovec* iov, int iovcnt, size_t max);

}  // namespace fastsock::shm
