// Whether the program an exec is about to start will run this library too.
//
// A connection that a user-space link carries can continue in the new program image only if
// that image loads the library and adopts it (src/exec_handover.hpp); otherwise it must be
// handed back to the kernel before the exec. The answer is conservative: anything unusual or
// unreadable says no, and a wrong "no" only costs acceleration, while a wrong "yes" would
// leave the peer sending into shared memory that nobody reads.
#pragma once

#include <cstddef>

namespace fastsock::exec_image {

// The file exec would run: `dirfd` and `path` as execveat takes them (AT_FDCWD and a path for
// execve; the program's descriptor and "" with AT_EMPTY_PATH for fexecve). It must be an
// ELF executable of this machine and word size with a program interpreter (dynamically
// linked), not set-user-ID, set-group-ID or carrying file capabilities (the loader ignores
// LD_PRELOAD paths for those), or a "#!" script whose interpreter is such a program; and
// the LD_PRELOAD of `envp` must name this very library file (same device and inode).
bool runs_library(int dirfd, const char* path, int at_flags, char* const envp[]) noexcept;

// execvp/execvpe: the file they would run for `file`, found in this process's PATH as
// glibc searches it (the first executable regular file; `file` itself when it contains a
// slash). False if none is found or it does not fit in `out`.
bool resolve_in_path(const char* file, char* out, size_t cap) noexcept;

}  // namespace fastsock::exec_image
