// Connections that continue over exec (design §4, issue 4: "exec: connections survive into a
// program that runs the library; otherwise they downgrade to TCP first").
//
// Before an exec, every connection a user-space link carries either continues in the new
// image or goes back to the kernel:
//   - it continues when the new program runs this library (src/exec_image.hpp), at least one
//     of its descriptors is inherited (not close-on-exec), and its link can hand it over in
//     its current state (Transport::exec_handover);
//   - otherwise it is downgraded, as before every fork.
// What the new image needs travels in one environment variable, which the new image reads
// once, when it adopts the sockets it inherited (src/ops_socket.cc):
//
//   FASTSOCK_EXEC_LINKS=<pid>;<link id>/<socket inode>/<fd>[,<fd>...]/<link's token>;...
//
// The pid is the exec'ing process's (exec keeps it): a process that inherits the variable
// through fork (a different pid), or a stale copy, adopts nothing. The inode ties each entry
// to the very socket, so a descriptor number reused since then is never mistaken for it.
#pragma once

#include <cstddef>

#include "exec_links.hpp"  // the variable's text: Entry, Role, bounds

namespace fastsock::exec_handover {

inline constexpr const char kVariable[] = "FASTSOCK_EXEC_LINKS";

// One exec attempt, in the image about to be replaced.
class Exec {
 public:
  // Decides for every connection a user-space link carries (`follows`: the new image runs
  // the library) and builds the new environment from `envp`.
  Exec(bool follows, char* const envp[]) noexcept;
  ~Exec();
  Exec(const Exec&) = delete;
  Exec& operator=(const Exec&) = delete;

  // The environment to pass: `envp` itself when nothing had to change.
  char* const* envp() const noexcept { return env_ ? env_ : envp_; }
  bool env_changed() const noexcept { return env_ != nullptr; }
  // The exec returned: the connections handed over go on in this image.
  void failed() noexcept;

 private:
  struct Handed;
  char* const* envp_;
  char** env_ = nullptr;
  char* variable_ = nullptr;
  Handed* handed_ = nullptr;
  int handed_count_ = 0;
};

// Whether `fd` stays open across an exec (no FD_CLOEXEC).
bool inherited_by_exec(int fd) noexcept;

// In the new image: what the previous image said about descriptor `fd`. Parses the
// variable (once; later calls reuse the result).
Role find(int fd, Entry& out) noexcept;
// Calls fn(extra_fd, first_fd) for every further descriptor of a handed-over connection.
void for_each_extra(void (*fn)(int extra_fd, int first_fd)) noexcept;

}  // namespace fastsock::exec_handover
