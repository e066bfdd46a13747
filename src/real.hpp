// The real libc entry points, resolved lazily and once with dlsym(RTLD_NEXT).
//
// Internal code calls these, never the hooked names, so the library does not re-enter its
// own hooks. Resolution happens on the first hooked call, not in a constructor: a host
// process may call socket functions from its own constructors before ours have run, and
// dlsym from a constructor can deadlock in some loaders.
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include <cstdio>

#include <atomic>

namespace fastsock {

#define FASTSOCK_REAL_FUNCTIONS(X)                                                          \
  X(socket, int, (int, int, int))                                                           \
  X(socketpair, int, (int, int, int, int*))                                                 \
  X(bind, int, (int, const sockaddr*, socklen_t))                                           \
  X(listen, int, (int, int))                                                                \
  X(accept, int, (int, sockaddr*, socklen_t*))                                              \
  X(accept4, int, (int, sockaddr*, socklen_t*, int))                                        \
  X(connect, int, (int, const sockaddr*, socklen_t))                                        \
  X(shutdown, int, (int, int))                                                              \
  X(close, int, (int))                                                                      \
  X(close_range, int, (unsigned, unsigned, int))                                            \
  X(closefrom, void, (int))                                                                 \
  X(fclose, int, (FILE*))                                                                    \
  X(fdopen, FILE*, (int, const char*))                                                       \
  X(dup, int, (int))                                                                        \
  X(dup2, int, (int, int))                                                                  \
  X(dup3, int, (int, int, int))                                                             \
  X(fcntl, int, (int, int, ...))                                                            \
  X(fcntl64, int, (int, int, ...))                                                          \
  X(ioctl, int, (int, unsigned long, ...))                                                  \
  X(getsockopt, int, (int, int, int, void*, socklen_t*))                                    \
  X(setsockopt, int, (int, int, int, const void*, socklen_t))                               \
  X(getsockname, int, (int, sockaddr*, socklen_t*))                                         \
  X(getpeername, int, (int, sockaddr*, socklen_t*))                                         \
  X(read, ssize_t, (int, void*, size_t))                                                    \
  X(readv, ssize_t, (int, const iovec*, int))                                               \
  X(write, ssize_t, (int, const void*, size_t))                                             \
  X(writev, ssize_t, (int, const iovec*, int))                                              \
  X(recv, ssize_t, (int, void*, size_t, int))                                               \
  X(recvfrom, ssize_t, (int, void*, size_t, int, sockaddr*, socklen_t*))                    \
  X(recvmsg, ssize_t, (int, msghdr*, int))                                                  \
  X(recvmmsg, int, (int, mmsghdr*, unsigned, int, timespec*))                               \
  X(send, ssize_t, (int, const void*, size_t, int))                                         \
  X(sendto, ssize_t, (int, const void*, size_t, int, const sockaddr*, socklen_t))           \
  X(sendmsg, ssize_t, (int, const msghdr*, int))                                            \
  X(sendmmsg, int, (int, mmsghdr*, unsigned, int))                                          \
  X(sendfile, ssize_t, (int, int, off_t*, size_t))                                          \
  X(sendfile64, ssize_t, (int, int, off64_t*, size_t))                                      \
  X(splice, ssize_t, (int, loff_t*, int, loff_t*, size_t, unsigned))                        \
  X(poll, int, (pollfd*, nfds_t, int))                                                      \
  X(ppoll, int, (pollfd*, nfds_t, const timespec*, const sigset_t*))                        \
  X(select, int, (int, fd_set*, fd_set*, fd_set*, timeval*))                                \
  X(pselect, int, (int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*))       \
  X(epoll_create, int, (int))                                                               \
  X(epoll_create1, int, (int))                                                              \
  X(epoll_ctl, int, (int, int, int, epoll_event*))                                          \
  X(epoll_wait, int, (int, epoll_event*, int, int))                                         \
  X(epoll_pwait, int, (int, epoll_event*, int, int, const sigset_t*))                       \
  X(epoll_pwait2, int, (int, epoll_event*, int, const timespec*, const sigset_t*))          \
  X(fork, pid_t, ())                                                                        \
  X(setuid, int, (uid_t))                                                                   \
  X(seteuid, int, (uid_t))                                                                  \
  X(setreuid, int, (uid_t, uid_t))                                                          \
  X(setresuid, int, (uid_t, uid_t, uid_t))                                                  \
  X(execve, int, (const char*, char* const*, char* const*))                                 \
  X(execv, int, (const char*, char* const*))                                                \
  X(execvp, int, (const char*, char* const*))                                               \
  X(execvpe, int, (const char*, char* const*, char* const*))                                \
  X(fexecve, int, (int, char* const*, char* const*))                                        \
  X(execveat, int, (int, const char*, char* const*, char* const*, int))                     \
  X(posix_spawn, int, (pid_t*, const char*, const posix_spawn_file_actions_t*,              \
                       const posix_spawnattr_t*, char* const*, char* const*))               \
  X(posix_spawnp, int, (pid_t*, const char*, const posix_spawn_file_actions_t*,             \
                        const posix_spawnattr_t*, char* const*, char* const*))              \
  X(posix_spawn_file_actions_adddup2, int, (posix_spawn_file_actions_t*, int, int))         \
  X(system, int, (const char*))                                                             \
  X(popen, FILE*, (const char*, const char*))                                               \
  X(__read_chk, ssize_t, (int, void*, size_t, size_t))                                      \
  X(__recv_chk, ssize_t, (int, void*, size_t, size_t, int))                                 \
  X(__recvfrom_chk, ssize_t, (int, void*, size_t, size_t, int, sockaddr*, socklen_t*))      \
  X(__poll_chk, int, (pollfd*, nfds_t, int, size_t))                                        \
  X(__ppoll_chk, int, (pollfd*, nfds_t, const timespec*, const sigset_t*, size_t))

struct RealLibc {
#define FASTSOCK_DECLARE_REAL(name, ret, args) ret(*name) args;
  FASTSOCK_REAL_FUNCTIONS(FASTSOCK_DECLARE_REAL)
#undef FASTSOCK_DECLARE_REAL
};

namespace detail {
extern RealLibc g_real;
extern std::atomic<bool> g_real_ready;
void resolve_real() noexcept;
}  // namespace detail

// The real entry points. The fast path is one acquire load.
inline const RealLibc& real() noexcept {
  if (!detail::g_real_ready.load(std::memory_order_acquire)) [[unlikely]]
    detail::resolve_real();
  return detail::g_real;
}

}  // namespace fastsock
