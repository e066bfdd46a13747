// How many descriptors a link may take for itself.
//
// The shm link holds two eventfds per connection (its own and the peer's) besides the
// socket, so under the library a process reaches its RLIMIT_NOFILE with fewer connections
// than without it. An application must never get EMFILE where it would not have: a link
// that needs descriptors of its own is used only while the new socket's number is below
// half the soft limit and the library's own descriptors (internal_fds::count) are below a
// third of it. Past that, connections stay on kernel TCP, with the reason in their stats,
// and the application keeps two thirds of the limit whatever it does. (The library's
// descriptors live above the application's numbers, internal_fds::take, so the socket's
// number counts about the application's descriptors alone.)
//
// Where the hard limit leaves room above the soft one, the library's descriptors go there
// instead (internal_fds.hpp, "Above the limit") and take none of the application's
// numbers: links then take descriptors while the library's fit in that room (link) or
// half of it (exec), whatever the application holds.
#pragma once

namespace fastsock::fd_budget {

// The reason a connection stays on TCP for want of descriptors.
inline constexpr const char kNoRoomReason[] =
    "descriptors: the rest of RLIMIT_NOFILE is kept for the application";

// Whether a link may take descriptors for the connection on socket `fd`. Reads the limit
// once and again only when `fd` is past half the remembered one or the application set it,
// so the common case costs no system call.
bool room_for_link(int fd) noexcept;

// Whether a connection on socket `fd` may keep one descriptor more so that it can continue
// over exec (the shm segment's memfd, src/exec_handover.hpp): only while `fd` is below a
// quarter of the soft limit and the library's descriptors below an eighth. Past that,
// descriptors are scarce (they go to more connections on the link) and the connection is
// downgraded at exec instead.
bool room_for_exec(int fd) noexcept;

}  // namespace fastsock::fd_budget
