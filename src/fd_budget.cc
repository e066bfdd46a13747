#include "fd_budget.hpp"

#include <atomic>

#include "config_load.hpp"
#include "internal_fds.hpp"

namespace fastsock::fd_budget {

namespace {

// Whether `n` is below the soft limit / divisor; the limit is read again only past that
// (a raw setrlimit system call may have raised it; the hooks make it read again anyway).
bool below(long n, long divisor) noexcept {
  long limit = internal_fds::nofile().soft;
  if (n >= limit / divisor) {
    internal_fds::forget_limits();
    limit = internal_fds::nofile().soft;
  }
  return limit > 0 && n < limit / divisor;
}

// Whether the library's descriptors, with `more` of them, fit: above the application's
// limit (internal_fds.hpp) within room / above_divisor, where they take none of its
// numbers; otherwise only while socket `fd` is below limit / fd_divisor and they stay
// below limit / share_divisor.
bool room(int fd, long fd_divisor, long more, long share_divisor, long above_divisor) noexcept {
  if (fd < 0) return false;
  if (!config().fd_budget) return true;
  const long above = internal_fds::room_above(internal_fds::nofile());
  if (above > 0) return internal_fds::count() + more <= above / above_divisor;
  return below(fd, fd_divisor) && below(internal_fds::count() + more, share_divisor);
}
}  // namespace

// A link connection takes up to three at an end (shm: two eventfds and the memfd).
bool room_for_link(int fd) noexcept { return room(fd, 2, 3, 3, 1); }

bool room_for_exec(int fd) noexcept { return room(fd, 4, 1, 8, 2); }

}  // namespace fastsock::fd_budget
