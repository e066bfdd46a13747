// How many of the application's descriptors a link may take for itself.
//
// The shm link holds two eventfds per connection (its own and the peer's) besides the
// socket, so under the library a process reaches its RLIMIT_NOFILE with fewer connections
// than without it. An application must never get EMFILE where it would not have: a link
// that needs descriptors of its own is used only while the new socket's number (the kernel
// hands out the lowest free one, so it tracks how many are open) is below half the soft
// limit. Past that, connections stay on kernel TCP, with the reason in their stats. The
// library's descriptors then hold at most a third of the limit, leaving the application
// two thirds of it whatever it does.
#pragma once

namespace fastsock::fd_budget {

// Whether a link may take descriptors for the connection on socket `fd`. Reads the limit
// once and again only when `fd` is past half the remembered one (setrlimit may have raised
// it), so the common case costs no system call.
bool room_for_link(int fd) noexcept;

// Whether a connection on socket `fd` may keep one descriptor more so that it can continue
// over exec (the shm segment's memfd, src/exec_handover.hpp): only while `fd` is below a
// quarter of the soft limit. Past that, descriptors are scarce and the connection is
// downgraded at exec instead. With it the library holds at most about 36 % of the limit.
bool room_for_exec(int fd) noexcept;

}  // namespace fastsock::fd_budget
