// A thread-local recursion guard.
//
// While the library does its own work (reading the rules file, and later: libibverbs opening
// device files, librdmacm polling its channel) the libraries it calls may call hooked public
// symbols. Those calls must reach the kernel directly, not our logic again.
#pragma once

namespace fastsock {

namespace detail {
// initial-exec: no __tls_get_addr (which may allocate) on the hot path of every hook.
extern thread_local int g_depth __attribute__((tls_model("initial-exec")));
}  // namespace detail

inline bool inside_library() noexcept { return detail::g_depth != 0; }

class ReentryGuard {
 public:
  ReentryGuard() noexcept { ++detail::g_depth; }
  ~ReentryGuard() { --detail::g_depth; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
};

}  // namespace fastsock
