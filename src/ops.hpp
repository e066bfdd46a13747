// The core behind every hook of the compatibility contract (design §7).
//
// Each function does what the libc function of the same name does, as seen by the
// application, and returns the result or -errno; the hooks in preload/ turn that into the
// libc convention. Untracked descriptors (files, pipes, UDP, Unix sockets) go straight to
// the real entry point after one table lookup.
//
// Deliberately not noexcept: many of these wrap cancellation points (read, recv, connect,
// poll, ...), and pthread_cancel unwinds through them with a forced-unwind exception; a
// noexcept frame on that path would turn a cancellation into std::terminate in the host.
// They throw nothing themselves.
#pragma once

#include <sys/resource.h>

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

namespace fastsock::ops {

// ops_socket.cc: connection lifecycle
long socket(int domain, int type, int protocol);
long socketpair(int domain, int type, int protocol, int sv[2]);
long bind(int fd, const sockaddr* addr, socklen_t len);
long listen(int fd, int backlog);
long accept4(int fd, sockaddr* addr, socklen_t* len, int flags);
long connect(int fd, const sockaddr* addr, socklen_t len);
long shutdown(int fd, int how);
long getsockopt(int fd, int level, int name, void* value, socklen_t* len);
long setsockopt(int fd, int level, int name, const void* value, socklen_t len);
long getsockname(int fd, sockaddr* addr, socklen_t* len);
long getpeername(int fd, sockaddr* addr, socklen_t* len);

// ops_fd.cc: descriptors
long close(int fd);
long close_range(unsigned first, unsigned last, int flags);
void closefrom(int lowfd);
// A FILE opened with fdopen() on a socket closes it inside glibc, out of the hooks' sight.
long fclose(FILE* stream);
// stdio reads and writes a FILE's descriptor inside glibc, out of the hooks' sight too: a
// connection that a link carries outside the kernel moves back to the kernel first. Returns
// what fdopen returns (errno set by it alone).
FILE* fdopen(int fd, const char* mode) noexcept;
long dup(int fd);
long dup2(int fd, int newfd);
long dup3(int fd, int newfd, int flags);
// `fcntl64` selects the fcntl64 entry point (identical on 64-bit glibc, kept distinct so a
// program gets exactly the function it linked against).
long fcntl(int fd, int cmd, void* arg, bool fcntl64);
long ioctl(int fd, unsigned long request, void* arg);

// ops_io.cc: data
long read(int fd, void* buf, size_t len);
long read_chk(int fd, void* buf, size_t len, size_t buflen);
long readv(int fd, const iovec* iov, int iovcnt);
long write(int fd, const void* buf, size_t len);
long writev(int fd, const iovec* iov, int iovcnt);
long recv(int fd, void* buf, size_t len, int flags);
long recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags);
long recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* addr, socklen_t* alen);
long recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags, sockaddr* addr,
                  socklen_t* alen);
long recvmsg(int fd, msghdr* msg, int flags);
long recvmmsg(int fd, mmsghdr* msgs, unsigned n, int flags, timespec* timeout);
long send(int fd, const void* buf, size_t len, int flags);
long sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
            socklen_t alen);
long sendmsg(int fd, const msghdr* msg, int flags);
long sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags);
// Whether any of the messages carries ancillary data (which may pass descriptors).
bool passes_control_data(const mmsghdr* msgs, unsigned n) noexcept;
long sendfile(int out_fd, int in_fd, off_t* offset, size_t count);
long sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count);
long splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
            unsigned flags);

// ops_poll.cc: readiness
long poll(pollfd* fds, nfds_t n, int timeout);
long poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen);
long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask);
long ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask,
               size_t fdslen);
long select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout);
long pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
             const sigset_t* mask);
long epoll_create(int size);
long epoll_create1(int flags);
long epoll_ctl(int epfd, int op, int fd, epoll_event* event);
long epoll_wait(int epfd, epoll_event* events, int max, int timeout);
long epoll_pwait(int epfd, epoll_event* events, int max, int timeout,
                 const sigset_t* mask);
long epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout,
                  const sigset_t* mask);

// ops_process.cc: fork and exec, and the calls that change the effective uid
long fork();
long vfork();
// getrlimit, setrlimit, prlimit (and their 64-bit names): RLIMIT_NOFILE of this process is
// read and set under internal_fds' limit lock, so the application never sees it raised
// for the library's moment (internal_fds.hpp, "Above the limit") nor has its own change
// undone by it; the library reads the limit again after a change. 0 or -errno.
long prlimit(pid_t pid, int resource, const rlimit* set, rlimit* old);
long setuid(uid_t uid);
long seteuid(uid_t euid);
long setreuid(uid_t ruid, uid_t euid);
long setresuid(uid_t ruid, uid_t euid, uid_t suid);
long execve(const char* path, char* const argv[], char* const envp[]);
long execv(const char* path, char* const argv[]);
long execvp(const char* file, char* const argv[]);
long execvpe(const char* file, char* const argv[], char* const envp[]);
long fexecve(int fd, char* const argv[], char* const envp[]);
long execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
              int flags);

// Children started without fork() (glibc starts them with clone(CLONE_VFORK) and execs
// inside itself, where no hook runs): every connection the child inherits (no FD_CLOEXEC)
// would be used by two processes, so it goes back to the kernel first, as before fork. A
// connection handed over by a dup2 file action goes back when the action is added.
// posix_spawn's result convention (an error number, errno untouched) is kept.
int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) noexcept;
int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) noexcept;
int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t* actions, int fd,
                                     int newfd) noexcept;
int system(const char* command) noexcept;
FILE* popen(const char* command, const char* mode) noexcept;

}  // namespace fastsock::ops
