// The calling process's pid, cached: glibc's getpid() is a system call every time (its
// cache went in 2.25), and setting up one connection asked for it five times.
//
// The cache is cleared in the child of every fork that runs pthread_atfork handlers:
// fork(), and vfork() (the preload library implements it as fork). A child made by a raw
// clone() or _Fork() that keeps running this library would see its parent's pid; the uses
// below are safe against that: a hello claiming the wrong pid is refused by the acceptor
// (SCM_CREDENTIALS), and the same-process handoff re-checks the real getpid() before it
// copies (shm_handoff.cc).
#pragma once

#include <sys/types.h>

namespace fastsock::shm {

pid_t current_pid() noexcept;

// The calling process's effective uid, cached: geteuid() is a system call, and every
// connect to a fastsock listener asked for it (a channel is kept per uid and destination,
// shm_rendezvous_channels.hpp). The preload library's setuid/seteuid/setreuid/setresuid
// hooks forget it. A change it cannot see (a raw system call) only costs acceleration,
// never safety: the acceptor checks the uid the kernel attaches to every hello
// (SCM_CREDENTIALS), so a stale value dials a record the process cannot use and the
// connection stays on TCP.
uid_t effective_uid() noexcept;
void forget_effective_uid() noexcept;

// Whether the real uid differs from the effective one (after seteuid() alone, or in a
// set-uid program), cached and forgotten with effective_uid(). The credentials the kernel
// attaches to a Unix message by itself carry the real uid, and the acceptor compares them
// with its own effective uid; such a process sends them explicitly with its effective uid
// (Dialer::send_to_listener), which the kernel accepts from a sender
// that holds that uid.
bool real_uid_differs() noexcept;

}  // namespace fastsock::shm
