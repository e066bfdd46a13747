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

// A descriptor the library just made (eventfd, socket, epoll set, memfd, one received over
// a rendezvous channel), before it is used anywhere: moved to the lowest free number at or
// above placement_base() (the original number closed), registered as with add(), and
// returned. The kernel hands out the lowest free number, so without the move each of the
// library's descriptors pushes the application's next ones up: wrk sizes its event loop
// for 10 + 3 x its connections descriptors and counted connect errors once the library's
// eventfds passed that, and a select() program reaches FD_SETSIZE sooner. If no number
// there is free (or the limit is lower), the descriptor stays where it is. -1 is returned
// as is, errno untouched. Always close-on-exec, as every descriptor of the library is
// (exec_handover clears it for the exec that needs it). Between its creation and the move
// the descriptor holds the lowest free number, which the kernel's calls that create give no
// way to avoid: copies of existing descriptors go through dup() instead.
int take(int fd) noexcept;

// A registered copy of `fd` made directly where take() would move it — above the soft
// limit when there is room there ("Above the limit", below), else at or above
// placement_base() (F_DUPFD) — for copies of existing descriptors. Unlike take() of a copy made at the lowest number, no
// application number is held even for a moment: a thread of the application that still
// names a descriptor another thread just closed (an epoll_wait on a set being closed) gets
// EBADF, as without the library, never the library's copy of something else. Falls back to
// the lowest number when nothing is free above the base. -1 with errno on failure.
int dup(int fd) noexcept;

// take() without registering: for descriptors received from a peer, which their owner
// registers once it keeps them.
int relocate(int fd) noexcept;

// Where take() puts descriptors when there is no room above the limit (below): half the
// soft RLIMIT_NOFILE, at most 4096 (the kernel's table grows to the highest number in use,
// and a fork copies it).
int placement_base() noexcept;

// Above the limit. The kernel checks RLIMIT_NOFILE only when it hands out a number, never
// for descriptors already open. So while the soft limit is below the hard one, relocate()
// raises it for a moment, puts the descriptor at the lowest free number at or above the
// application's soft limit, and sets the limit back: the application keeps every number
// of its limit, and gets EMFILE exactly where it would without the library. Only for soft
// limits up to kHighMaxSoft (beyond, the kernel's table would grow past it for our few
// descriptors, and there is plenty of room below anyway), and up to kHighRoom numbers past
// the soft limit. The application's getrlimit/setrlimit/prlimit wait while the limit is
// raised (limit_lock), so it never sees the raised value nor loses a change of its own.
inline constexpr long kHighMaxSoft = 65536;
inline constexpr long kHighRoom = 65536;

struct Limits {
  long soft;  // RLIMIT_NOFILE, RLIM_INFINITY or anything past 2^30 as 2^30
  long hard;
};
// As last read (once, and again after forget_limits()).
Limits nofile() noexcept;
// The application changed the limit (or may have): read it again at the next nofile().
void forget_limits() noexcept;
// How many descriptors fit above the soft limit: 0 when there is no such room.
long room_above(const Limits& l) noexcept;
// Held while the library's raise is in flight; the rlimit hooks take it around the
// application's own calls. A leaf lock; taken across fork.
void lock_limits() noexcept;
void unlock_limits() noexcept;

// How many descriptors are registered now (the library's share, fd_budget.hpp).
long count() noexcept;
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
