// fork and exec.
//
// fork: registered handlers take the core's locks before the fork and release them on
// both sides, so a child forked while another thread held one does not deadlock; the
// child then gets its own stats area. vfork is implemented as fork (see preload/): a vfork
// child shares the parent's memory, and any bookkeeping it did would corrupt the parent's;
// it moves only the connections the exec'd program inherits (vfork_gate.hpp).
//
// exec: the stats file of this pid is unlinked before the image is replaced and restored
// if exec fails. A connection a user-space link carries continues in the new image when
// that image runs the library too, else it goes back to the kernel (exec_handover.hpp).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "exec_handover.hpp"
#include "exec_image.hpp"
#include "fd_table.hpp"
#include "internal_fds.hpp"
#include "mem_watch.hpp"
#include "ops.hpp"
#include "process.hpp"
#include "real.hpp"
#include "result.hpp"
#include "shm_process.hpp"
#include "transport.hpp"
#include "user_io.hpp"
#include "stats.hpp"
#include "vfork_gate.hpp"

namespace fastsock {

// Not instrumented by sanitizers (FASTSOCK_EARLY_SAFE): a sanitizer's runtime calls
// getrlimit/setrlimit through libc while it sets itself up, before instrumented code may run
// (every program crashed under the ASan build of the library with these hooks instrumented).
FASTSOCK_EARLY_SAFE long ops::prlimit(pid_t pid, int resource, const rlimit* set, rlimit* old) {
  // A raw system call: glibc's wrappers are this very call, and its own names are hooked.
  const bool nofile = resource == RLIMIT_NOFILE && (pid == 0 || pid == getpid());
  if (nofile) internal_fds::lock_limits();
  const long rc = syscall(SYS_prlimit64, pid, resource, set, old);
  const int err = errno;
  if (nofile) {
    if (rc == 0 && set) internal_fds::forget_limits();
    internal_fds::unlock_limits();
  }
  return rc == 0 ? 0 : -long(err);
}

namespace {
constexpr int kMaxForkHandlers = 16;
// Constant-initialised, so registration from any translation unit's static initialiser
// works whatever the initialisation order.
constinit ForkHandlers g_handlers[kMaxForkHandlers]{};
constinit std::atomic<int> g_handler_count{0};
}  // namespace

void register_fork_handlers(const ForkHandlers& handlers) noexcept {
  const int i = g_handler_count.fetch_add(1);
  if (i < kMaxForkHandlers) g_handlers[i] = handlers;
}

namespace {
// The limit lock across fork (internal_fds.hpp): a child must not find it held by a thread
// it does not have.
const bool g_limit_lock_registered = (register_fork_handlers(ForkHandlers{
    internal_fds::lock_limits, internal_fds::unlock_limits, internal_fds::unlock_limits}), true);
}  // namespace

namespace {

// Every connection a link carries outside the kernel goes back to the kernel before fork:
// two processes would share one end of a ring; the kernel socket follows both correctly.
void downgrade_all(const char* why) noexcept {
  fd_table::for_each_socket(
      [](int fd, Socket& s, void* reason) {
        if (Transport* link = ops::user_link(s))
          link->downgrade(s, fd, static_cast<const char*>(reason));
      },
      const_cast<char*>(why));
}

// Before a child that may only exec is started (posix_spawn, system, popen, vfork): the
// connections it inherits go back to the kernel, the others stay on their links (the
// child cannot reach them). Dup'ed descriptors share a Socket: any inheritable one moves it.
void downgrade_inheritable(const char* why) noexcept {
  const int saved_errno = errno;
  fd_table::for_each_socket(
      [](int fd, Socket& s, void* reason) {
        Transport* link = ops::user_link(s);
        if (link && exec_handover::inherited_by_exec(fd))
          link->downgrade(s, fd, static_cast<const char*>(reason));
      },
      const_cast<char*>(why));
  errno = saved_errno;
}

}  // namespace

namespace ops {

namespace {
pid_t fork_with_handlers() {
  const int n = std::min(g_handler_count.load(), kMaxForkHandlers);
  for (int i = 0; i < n; ++i) g_handlers[i].prepare();
  const pid_t pid = real().fork();
  const int err = errno;
  // Release in the reverse order of acquisition.
  for (int i = n - 1; i >= 0; --i) (pid == 0 ? g_handlers[i].child : g_handlers[i].parent)();
  errno = err;
  return pid;
}
}  // namespace

long fork() {
  downgrade_all("fork");
  const pid_t pid = fork_with_handlers();
  return pid < 0 ? -errno : pid;
}

// vfork as fork, but only the connections the exec'd program can inherit move to TCP
// (src/vfork_gate.hpp).
long vfork() {
  vfork_gate::Gate gate;
  if (!vfork_gate::open(gate)) return fork();
  downgrade_inheritable("vfork");
  const pid_t pid = fork_with_handlers();
  const int err = errno;
  if (pid == 0) {
    vfork_gate::enter_child(gate);
    return 0;
  }
  vfork_gate::wait_for_child(gate, pid);
  return pid < 0 ? -err : pid;
}

// The uid the rendezvous keys its channels by is cached (shm_process.hpp): forgotten
// after every change, failed ones included (cheaper than deciding which failed partly).
// The stats file follows the new effective uid (stats::before_uid_change).
namespace {
template <typename Call>
long change_uid(uid_t new_euid, Call&& call) {
  const unsigned old_owner = stats::before_uid_change(new_euid);
  const int rc = call();
  const int err = errno;
  if (rc < 0) stats::after_failed_uid_change(old_owner);
  shm::forget_effective_uid();
  return rc < 0 ? -err : rc;
}
}  // namespace

long setuid(uid_t uid) {
  return change_uid(uid, [&] { return real().setuid(uid); });
}
long seteuid(uid_t euid) {
  return change_uid(euid, [&] { return real().seteuid(euid); });
}
long setreuid(uid_t ruid, uid_t euid) {
  return change_uid(euid, [&] { return real().setreuid(ruid, euid); });
}
long setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  return change_uid(euid, [&] { return real().setresuid(ruid, euid, suid); });
}

namespace {
// Runs an exec entry point with the stats file unlinked; it only returns on failure.
// `follows`: the new program runs this library, so connections may continue there
// (exec_handover.hpp); the call gets the environment to pass, or null to keep its own.
template <typename Call>
long exec_with(bool follows, char* const envp[], Call&& call) {
  vfork_gate::before_exec();
  exec_handover::Exec handover(follows, envp);
  stats::before_exec();
  const long rc = neg_errno(call(handover.env_changed() ? handover.envp() : nullptr));
  stats::after_failed_exec();
  handover.failed();
  return rc;
}

bool path_runs_library(const char* path, char* const envp[]) {
  return exec_image::runs_library(AT_FDCWD, path, 0, envp);
}

bool file_runs_library(const char* file, char* const envp[]) {
  char path[4096];
  return exec_image::resolve_in_path(file, path, sizeof path) && path_runs_library(path, envp);
}
}  // namespace

long execve(const char* path, char* const argv[], char* const envp[]) {
  return exec_with(path_runs_library(path, envp), envp, [&](char* const* env) {
    return real().execve(path, argv, env ? env : envp);
  });
}

long execv(const char* path, char* const argv[]) {
  return exec_with(path_runs_library(path, environ), environ, [&](char* const* env) {
    return env ? real().execve(path, argv, env) : real().execv(path, argv);
  });
}

long execvp(const char* file, char* const argv[]) {
  return exec_with(file_runs_library(file, environ), environ, [&](char* const* env) {
    return env ? real().execvpe(file, argv, env) : real().execvp(file, argv);
  });
}

long execvpe(const char* file, char* const argv[], char* const envp[]) {
  return exec_with(file_runs_library(file, envp), envp, [&](char* const* env) {
    return real().execvpe(file, argv, env ? env : envp);
  });
}

long fexecve(int fd, char* const argv[], char* const envp[]) {
  return exec_with(exec_image::runs_library(fd, "", AT_EMPTY_PATH, envp), envp,
                   [&](char* const* env) { return real().fexecve(fd, argv, env ? env : envp); });
}

long execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
              int flags) {
  return exec_with(exec_image::runs_library(dirfd, path, flags, envp), envp,
                   [&](char* const* env) {
                     return real().execveat(dirfd, path, argv, env ? env : envp, flags);
                   });
}

int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) noexcept {
  downgrade_inheritable("posix_spawn");
  return real().posix_spawn(pid, path, actions, attr, argv, envp);
}

int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) noexcept {
  downgrade_inheritable("posix_spawn");
  return real().posix_spawnp(pid, file, actions, attr, argv, envp);
}

// The action makes `fd` the child's `newfd`, inheritable whatever FD_CLOEXEC says. Moved
// now: at the spawn the actions are glibc's opaque list.
int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t* actions, int fd,
                                     int newfd) noexcept {
  downgrade_fd(fd, "posix_spawn file action");
  return real().posix_spawn_file_actions_adddup2(actions, fd, newfd);
}

int system(const char* command) noexcept {
  if (command) downgrade_inheritable("system");  // system(NULL) only asks for a shell
  return real().system(command);
}

FILE* popen(const char* command, const char* mode) noexcept {
  downgrade_inheritable("popen");
  return real().popen(command, mode);
}

}  // namespace ops
}  // namespace fastsock
