// Copying out of a shared mapping that another process may truncate.
#pragma once

#include <cstddef>

namespace fastsock::tool {

// memcpy(dst, src, n) where `src` is a file mapping: if the file is truncated meanwhile,
// touching the lost pages raises SIGBUS; this returns false instead of dying. Not
// thread-safe (it swaps the process's SIGBUS handler for the duration of the copy); the
// tool is single-threaded.
bool copy_guarded(void* dst, const void* src, size_t n);

}  // namespace fastsock::tool
