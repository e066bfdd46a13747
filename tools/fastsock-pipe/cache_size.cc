#include "cache_size.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace fastsock_pipe {
namespace {

constexpr std::size_t kFallback = 32u << 20;

// /sys/.../cache/indexN/size reads like "266240K".
std::size_t sysfs_largest_cache() {
  std::size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::size_t v = 0;
    char unit = 0;
    if (!(f >> v)) continue;
    if (f >> unit) v *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
    best = std::max(best, v);
  }
  return best;
}

}  // namespace

std::size_t cache_bytes_to_exceed(std::size_t given) {
  if (given) return given;
  long v = 0;
  for (int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    v = sysconf(name);
    if (v > 0) return static_cast<std::size_t>(v);
  }
  const std::size_t sys = sysfs_largest_cache();
  return sys ? sys : kFallback;
}

}  // namespace fastsock_pipe
