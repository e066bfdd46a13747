// The library's own descriptors (eventfds, rendezvous sockets, epoll bells), kept out of the
// application's reach.
//
// An application never received these numbers, so from its point of view they are not
// open: a close() of one (a daemon's "close everything" loop, a double close whose stale
// number the library reused) gets EBADF and leaves it alone, and close_range()/closefrom()
// close everything around them. Without this, such a close silently killed a connection's
// wake-ups, and the next eventfd write of the library could land in whatever file the
// application opened under the recycled number. dup2/dup3 onto one of these numbers cannot
// be refused (the kernel replaces it): owners that can forget such a descriptor register a
// handler (on_replaced); the others lose it (documented in docs/compatibility.md).
#pragma once

namespace fastsock::internal_fds {

// Registers / forgets one of the library's descriptors. Lock-free; -1 is ignored.
void add(int fd) noexcept;
void remove(int fd) noexcept;

// Forgets `fd`, then closes it (in that order: once closed, the number may be reused at once
// for an application descriptor, which must not look internal). Returns close's result.
int close(int fd) noexcept;

// The application replaced one of the library's descriptors (dup2/dup3 onto its number:
// the kernel closed ours). Every handler registered with on_replaced() forgets what it kept
// under that number; then the number is no longer internal.
using ReplacedHandler = void (*)(int fd) noexcept;
void on_replaced(ReplacedHandler handler) noexcept;  // at most 4; idempotent
void replaced(int fd) noexcept;

// Whether `fd` is one of the library's descriptors.
bool contains(int fd) noexcept;

// Closes [first, last] (last may be ~0u) except the library's descriptors, with the kernel's
// close_range flags. Returns 0 or -errno.
long close_range_sparing(unsigned first, unsigned last, int flags) noexcept;

}  // namespace fastsock::internal_fds
