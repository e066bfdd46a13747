// The cache size that cache-invalidate mode (-I) must exceed.
#pragma once

#include <cstddef>

namespace fastsock_pipe {

// `given` when non-zero (--cache-bytes); otherwise the largest CPU cache the system reports
// (sysconf, then /sys/devices/system/cpu/cpu0/cache), or 32 MiB when neither says.
std::size_t cache_bytes_to_exceed(std::size_t given);

}  // namespace fastsock_pipe
