// fork and exec.
//
// fork: registered handlers take the core's locks before the fork and release them on
// both sides, so a child forked while another thread held one does not deadlock; the
// child then gets its own stats area. vfork is implemented as fork (see preload/): a vfork
// child shares the parent's memory, and any bookkeeping it did would corrupt the parent's.
//
// exec: the stats file of this pid is unlinked before the image is replaced and restored
// if exec fails. Connections themselves need nothing while the kernel carries them all.
#include <unistd.h>

#include <atomic>

#include "fd_table.hpp"
#include "ops.hpp"
#include "process.hpp"
#include "real.hpp"
#include "result.hpp"
#include "transport.hpp"
#include "user_io.hpp"
#include "stats.hpp"

namespace fastsock {

namespace {
constexpr int kMaxForkHandlers = 8;
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

// Every connection a link carries outside the kernel goes back to the kernel before fork
// and exec: after fork two processes would share one end of a ring, and an exec'd program
// cannot find the ring at all; the kernel socket follows both correctly.
void downgrade_all(const char* why) noexcept {
  fd_table::for_each_socket(
      [](int fd, Socket& s, void* reason) {
        if (Transport* link = ops::user_link(s))
          link->downgrade(s, fd, static_cast<const char*>(reason));
      },
      const_cast<char*>(why));
}

}  // namespace

namespace ops {

long fork() {
  downgrade_all("fork");
  const int n = std::min(g_handler_count.load(), kMaxForkHandlers);
  for (int i = 0; i < n; ++i) g_handlers[i].prepare();
  const pid_t pid = real().fork();
  const int err = errno;
  // Release in the reverse order of acquisition.
  for (int i = n - 1; i >= 0; --i) (pid == 0 ? g_handlers[i].child : g_handlers[i].parent)();
  return pid < 0 ? -err : pid;
}

namespace {
// Runs an exec entry point with the stats file unlinked; it only returns on failure.
template <typename Call>
long exec_with(Call&& call) {
  downgrade_all("exec");
  stats::before_exec();
  const long rc = neg_errno(call());
  stats::after_failed_exec();
  return rc;
}
}  // namespace

long execve(const char* path, char* const argv[], char* const envp[]) {
  return exec_with([&] { return real().execve(path, argv, envp); });
}

long execv(const char* path, char* const argv[]) {
  return exec_with([&] { return real().execv(path, argv); });
}

long execvp(const char* file, char* const argv[]) {
  return exec_with([&] { return real().execvp(file, argv); });
}

long execvpe(const char* file, char* const argv[], char* const envp[]) {
  return exec_with([&] { return real().execvpe(file, argv, envp); });
}

long fexecve(int fd, char* const argv[], char* const envp[]) {
  return exec_with([&] { return real().fexecve(fd, argv, envp); });
}

long execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
              int flags) {
  return exec_with([&] { return real().execveat(dirfd, path, argv, envp, flags); });
}

}  // namespace ops
}  // namespace fastsock
