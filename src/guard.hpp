// A thread-local recursion guard.
//
// While the library does its own work (reading the rules file, adopting inherited sockets,
// and later: libibverbs opening device files, librdmacm polling its channel) the libraries
// it calls may call hooked public symbols. Those calls must reach the kernel directly, not
// our logic again. Only connection set-up consults the guard, never the data path, so the
// functions are out of line (which also keeps the thread-local's access in one place).
#pragma once

namespace fastsock {

bool inside_library() noexcept;

class ReentryGuard {
 public:
  ReentryGuard() noexcept;
  ~ReentryGuard();
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
};

}  // namespace fastsock
