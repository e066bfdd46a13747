// Small result conventions shared by the core.
//
// Core functions return -errno on failure (liburing style); only the hooks in preload/
// translate that into errno, and they leave errno untouched on success.
#pragma once

#include <cerrno>
#include <sys/types.h>

namespace fastsock {

// Turns a "-1 and errno" libc result into a "-errno" result.
inline long neg_errno(long rc) noexcept { return rc < 0 ? -errno : rc; }

}  // namespace fastsock
