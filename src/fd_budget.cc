#include "fd_budget.hpp"

#include <sys/resource.h>

#include <atomic>

#include "config_load.hpp"
#include "internal_fds.hpp"

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

// Whether `n` is below limit / divisor; the limit is read again only past that.
bool below(long n, long divisor) noexcept {
  long limit = g_soft_limit.load(std::memory_order_relaxed);
  if (limit < 0 || n >= limit / divisor) limit = read_soft_limit();
  return limit > 0 && n < limit / divisor;
}

// Whether socket `fd` is below limit / fd_divisor and the library's descriptors, with
// `more` of them, below limit / share_divisor.
bool room(int fd, long fd_divisor, long more, long share_divisor) noexcept {
  if (fd < 0) return false;
  if (!config().fd_budget) return true;
  return below(fd, fd_divisor) && below(internal_fds::count() + more, share_divisor);
}
}  // namespace

// A link connection takes up to three at an end (shm: two eventfds and the memfd).
bool room_for_link(int fd) noexcept { return room(fd, 2, 3, 3); }

bool room_for_exec(int fd) noexcept { return room(fd, 4, 1, 8); }

}  // namespace fastsock::fd_budget
