// vfork without moving the parent's connections to TCP.
//
// A vfork child may only exec or _exit (POSIX; Python's subprocess and other spawners keep
// to that, with dup2/close/fcntl on the way). So a connection the exec'd program cannot
// inherit stays on its link in the parent, where fork would move every connection to TCP:
// a Python server that runs subprocess.run kept none of its connections on shm before.
//
// The library still implements vfork as fork (a real vfork child would share, and could
// corrupt, the library's state), with vfork's other rule: the calling thread waits until
// the child execs or ends. Around it:
//   parent, before  connections the exec'd program would inherit (no FD_CLOEXEC) move to
//                   TCP (ops::vfork); a control socket pair joins the two processes.
//   child           every connection still on a link is the parent's: its copy here is
//                   turned into a plain kernel socket, never touching the link's shared
//                   state (close, dup2 and fcntl then act on the kernel socket only).
//   child, exec     one of those made inheritable meanwhile (fcntl, FIONCLEX, dup2 onto
//                   stdin, Python's pass_fds) would reach the new program while its stream
//                   is on the parent's link: the child asks the parent, still waiting, to
//                   move it to TCP first, and waits for the answer.
//   parent, after   serves those requests until the control socket closes: the child's
//                   exec succeeded (close-on-exec) or it ended.
#pragma once

#include <sys/types.h>

namespace fastsock::vfork_gate {

// One vfork's control socket pair (the library's descriptors, close-on-exec).
struct Gate {
  int parent_end = -1;
  int child_end = -1;
};

// Parent: makes the pair; false if it cannot (then fork() is used instead).
bool open(Gate& gate) noexcept;
// Child, right after the fork: the parent's connections become kernel sockets here.
void enter_child(Gate& gate) noexcept;
// Parent, right after the fork (pid < 0: it failed): waits for the child as described,
// then closes the pair.
void wait_for_child(Gate& gate, pid_t pid) noexcept;
// Child, before any exec: the parent moves the inheritable ones to TCP. No-op elsewhere.
void before_exec() noexcept;

}  // namespace fastsock::vfork_gate
