// Exported hooks: fork, vfork, the exec family, posix_spawn, system and popen, _exit and
// _Exit, the set*uid calls, and the RLIMIT_NOFILE calls.
#include <alloca.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>

#include "hook.hpp"
#include "mem_watch.hpp"
#include "stats.hpp"

using namespace fastsock;

FASTSOCK_HOOK pid_t fork() noexcept { FASTSOCK_RETURN(pid_t, ops::fork()); }

// The effective uid is cached for the rendezvous (shm_process.hpp): these forget it.
FASTSOCK_HOOK int setuid(uid_t uid) noexcept { FASTSOCK_RETURN(int, ops::setuid(uid)); }
FASTSOCK_HOOK int seteuid(uid_t euid) noexcept { FASTSOCK_RETURN(int, ops::seteuid(euid)); }
FASTSOCK_HOOK int setreuid(uid_t ruid, uid_t euid) noexcept {
  FASTSOCK_RETURN(int, ops::setreuid(ruid, euid));
}
FASTSOCK_HOOK int setresuid(uid_t ruid, uid_t euid, uid_t suid) noexcept {
  FASTSOCK_RETURN(int, ops::setresuid(ruid, euid, suid));
}

// vfork as fork: POSIX allows it, and a real vfork child would share (and could corrupt)
// the parent's library state. A wrapper cannot return into a vfork child safely anyway.
FASTSOCK_HOOK pid_t vfork() noexcept { FASTSOCK_RETURN(pid_t, ops::vfork()); }

// posix_spawn's convention: an error number returned, errno left alone.
FASTSOCK_HOOK int posix_spawn(pid_t* pid, const char* path,
                              const posix_spawn_file_actions_t* actions,
                              const posix_spawnattr_t* attr, char* const argv[],
                              char* const envp[]) noexcept {
  return ops::posix_spawn(pid, path, actions, attr, argv, envp);
}
FASTSOCK_HOOK int posix_spawnp(pid_t* pid, const char* file,
                               const posix_spawn_file_actions_t* actions,
                               const posix_spawnattr_t* attr, char* const argv[],
                               char* const envp[]) noexcept {
  return ops::posix_spawnp(pid, file, actions, attr, argv, envp);
}
FASTSOCK_HOOK int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t* actions, int fd,
                                                   int newfd) noexcept {
  return ops::posix_spawn_file_actions_adddup2(actions, fd, newfd);
}
FASTSOCK_HOOK int system(const char* command) noexcept { return ops::system(command); }
FASTSOCK_HOOK FILE* popen(const char* command, const char* mode) noexcept {
  return ops::popen(command, mode);
}

FASTSOCK_HOOK int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  FASTSOCK_RETURN(int, ops::execve(path, argv, envp));
}
FASTSOCK_HOOK int execv(const char* path, char* const argv[]) noexcept {
  FASTSOCK_RETURN(int, ops::execv(path, argv));
}
FASTSOCK_HOOK int execvp(const char* file, char* const argv[]) noexcept {
  FASTSOCK_RETURN(int, ops::execvp(file, argv));
}
FASTSOCK_HOOK int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  FASTSOCK_RETURN(int, ops::execvpe(file, argv, envp));
}
FASTSOCK_HOOK int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  FASTSOCK_RETURN(int, ops::fexecve(fd, argv, envp));
}
FASTSOCK_HOOK int execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
                           int flags) noexcept {
  FASTSOCK_RETURN(int, ops::execveat(dirfd, path, argv, envp, flags));
}

// execl, execlp, execle: gather the NULL-terminated variadic list into an argv on the
// stack (as glibc does), then take the execv* path. For execle the environment follows
// the terminating NULL.
#define FASTSOCK_GATHER_ARGV(first, argv, envp_out)                 \
  va_list ap;                                                       \
  va_start(ap, first);                                              \
  va_list count_ap;                                                 \
  va_copy(count_ap, ap);                                            \
  size_t argc = 1;                                                  \
  while (va_arg(count_ap, char*)) ++argc;                           \
  va_end(count_ap);                                                 \
  char** argv = static_cast<char**>(alloca((argc + 1) * sizeof(char*))); \
  argv[0] = const_cast<char*>(first);                               \
  for (size_t i = 1; i <= argc; ++i) argv[i] = va_arg(ap, char*);   \
  envp_out;                                                         \
  va_end(ap)

FASTSOCK_HOOK int execl(const char* path, const char* arg, ...) noexcept {
  FASTSOCK_GATHER_ARGV(arg, argv, (void)0);
  FASTSOCK_RETURN(int, ops::execv(path, argv));
}
FASTSOCK_HOOK int execlp(const char* file, const char* arg, ...) noexcept {
  FASTSOCK_GATHER_ARGV(arg, argv, (void)0);
  FASTSOCK_RETURN(int, ops::execvp(file, argv));
}
FASTSOCK_HOOK int execle(const char* path, const char* arg, ...) noexcept {
  char* const* envp = nullptr;
  FASTSOCK_GATHER_ARGV(arg, argv, envp = va_arg(ap, char* const*));
  FASTSOCK_RETURN(int, ops::execve(path, argv, envp));
}

// _exit and _Exit end the process without running destructors — forked children and
// daemons call them all the time — so the stats file is unlinked here, as a normal exit
// does, then the process ends the way glibc's _exit ends it (exit_group).
FASTSOCK_HOOK void _exit(int status) noexcept {
  stats::before_exit();
  for (;;) syscall(SYS_exit_group, status);
}
FASTSOCK_HOOK void _Exit(int status) noexcept { _exit(status); }

// RLIMIT_NOFILE under the library's limit lock (ops::prlimit). On the 64-bit ABIs glibc
// supports, struct rlimit64 is struct rlimit. Not instrumented by sanitizers, and without
// FASTSOCK_RETURN's helpers: a sanitizer's runtime calls these while it sets itself up.
static_assert(sizeof(rlimit) == sizeof(rlimit64));
namespace {
FASTSOCK_EARLY_SAFE int rlimit_call(pid_t pid, int resource, const void* set, void* old) noexcept {
  const long rc = ops::prlimit(pid, resource, static_cast<const rlimit*>(set),
                               static_cast<rlimit*>(old));
  if (rc == 0) return 0;
  errno = int(-rc);
  return -1;
}
}  // namespace
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int getrlimit(__rlimit_resource_t resource, rlimit* rl) noexcept {
  return rlimit_call(0, resource, nullptr, rl);
}
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int getrlimit64(__rlimit_resource_t resource, rlimit64* rl) noexcept {
  return rlimit_call(0, resource, nullptr, rl);
}
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int setrlimit(__rlimit_resource_t resource, const rlimit* rl) noexcept {
  return rlimit_call(0, resource, rl, nullptr);
}
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int setrlimit64(__rlimit_resource_t resource,
                                                  const rlimit64* rl) noexcept {
  return rlimit_call(0, resource, rl, nullptr);
}
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int prlimit(pid_t pid, __rlimit_resource resource,
                                              const rlimit* set, rlimit* old) noexcept {
  return rlimit_call(pid, resource, set, old);
}
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int prlimit64(pid_t pid, __rlimit_resource resource,
                                                const rlimit64* set, rlimit64* old) noexcept {
  return rlimit_call(pid, resource, set, old);
}
