#include "fd_budget.hpp"

#include <sys/resource.h>

#include <atomic>

#include "config_load.hpp"

namespace fastsock::fd_budget {

namespace {
std::atomic<long> g_soft_limit{-1};  // -1: not read yet

long read_soft_limit() noexcept {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  const long limit = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1ul << 30)
                         ? long(1) << 30
                         : long(rl.rlim_cur);
  g_soft_limit.store(limit, std::memory_order_relaxed);
  return limit;
}

// Whether `fd` is below limit / divisor; the limit is read again only past that.
bool below(int fd, long divisor) noexcept {
  if (fd < 0) return false;
  if (!config().fd_budget) return true;
  long limit = g_soft_limit.load(std::memory_order_relaxed);
  if (limit < 0 || fd >= limit / divisor) limit = read_soft_limit();
  return limit > 0 && fd < limit / divisor;
}
}  // namespace

bool room_for_link(int fd) noexcept { return below(fd, 2); }

bool room_for_exec(int fd) noexcept { return below(fd, 4); }

}  // namespace fastsock::fd_budget
