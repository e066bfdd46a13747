#include "guard.hpp"

namespace fastsock {

namespace {
// initial-exec: no __tls_get_addr (which may allocate) when a hook runs inside the loader
// or an allocator.
thread_local int t_depth __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

bool inside_library() noexcept { return t_depth != 0; }
ReentryGuard::ReentryGuard() noexcept { ++t_depth; }
ReentryGuard::~ReentryGuard() { --t_depth; }

}  // namespace fastsock
