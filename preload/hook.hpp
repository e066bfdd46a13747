// What every exported hook shares: visibility and the libc result convention.
//
// A hook is one line: it calls the core (src/ops.hpp), which returns a result or -errno,
// and FASTSOCK_RETURN turns that into libc's "-1 and errno" while leaving errno exactly
// as the application had it when the call succeeds (the library's own bookkeeping may
// have touched it). The core is noexcept, so no exception can cross this boundary.
#pragma once

#include <cerrno>

#include "ops.hpp"

#define FASTSOCK_HOOK extern "C" __attribute__((visibility("default")))

namespace fastsock {
template <typename T>
inline T libc_result(long rc, int saved_errno) noexcept {
  if (rc < 0) {
    errno = int(-rc);
    return T(-1);
  }
  errno = saved_errno;
  return T(rc);
}
}  // namespace fastsock

// For the data and readiness calls, whose core path is the real call plus an atomic counter
// and never touches errno on success (releasing a Socket saves and restores it): no save
// and restore, which was a measurable share of a file read()'s added cost.
#define FASTSOCK_RETURN_DIRECT(type, expr)                 \
  do {                                                     \
    const long fastsock_rc = (expr);                       \
    if (fastsock_rc < 0) [[unlikely]] {                    \
      errno = int(-fastsock_rc);                           \
      return type(-1);                                     \
    }                                                      \
    return type(fastsock_rc);                              \
  } while (0)

#define FASTSOCK_RETURN(type, expr)                        \
  do {                                                     \
    const int fastsock_saved_errno = errno;                \
    return ::fastsock::libc_result<type>((expr), fastsock_saved_errno); \
  } while (0)
