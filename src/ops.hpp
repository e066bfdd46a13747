// The core behind every hook of the compatibility contract (design §7).
//
// Each function does what the libc function of the same name does, as seen by the
// application, and returns the result or -errno; the hooks in preload/ turn that into the
// libc convention. Untracked descriptors (files, pipes, UDP, Unix sockets) go straight to
// the real entry point after one table lookup.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

namespace fastsock::ops {

// ops_socket.cc: connection lifecycle
long socket(int domain, int type, int protocol) noexcept;
long socketpair(int domain, int type, int protocol, int sv[2]) noexcept;
long bind(int fd, const sockaddr* addr, socklen_t len) noexcept;
long listen(int fd, int backlog) noexcept;
long accept4(int fd, sockaddr* addr, socklen_t* len, int flags) noexcept;
long connect(int fd, const sockaddr* addr, socklen_t len) noexcept;
long shutdown(int fd, int how) noexcept;
long getsockopt(int fd, int level, int name, void* value, socklen_t* len) noexcept;
long setsockopt(int fd, int level, int name, const void* value, socklen_t len) noexcept;
long getsockname(int fd, sockaddr* addr, socklen_t* len) noexcept;
long getpeername(int fd, sockaddr* addr, socklen_t* len) noexcept;

// ops_fd.cc: descriptors
long close(int fd) noexcept;
long close_range(unsigned first, unsigned last, int flags) noexcept;
void closefrom(int lowfd) noexcept;
long dup(int fd) noexcept;
long dup2(int fd, int newfd) noexcept;
long dup3(int fd, int newfd, int flags) noexcept;
// `fcntl64` selects the fcntl64 entry point (identical on 64-bit glibc, kept distinct so a
// program gets exactly the function it linked against).
long fcntl(int fd, int cmd, void* arg, bool fcntl64) noexcept;
long ioctl(int fd, unsigned long request, void* arg) noexcept;

// ops_io.cc: data
long read(int fd, void* buf, size_t len) noexcept;
long read_chk(int fd, void* buf, size_t len, size_t buflen) noexcept;
long readv(int fd, const iovec* iov, int iovcnt) noexcept;
long write(int fd, const void* buf, size_t len) noexcept;
long writev(int fd, const iovec* iov, int iovcnt) noexcept;
long recv(int fd, void* buf, size_t len, int flags) noexcept;
long recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags) noexcept;
long recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* addr, socklen_t* alen) noexcept;
long recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags, sockaddr* addr,
                  socklen_t* alen) noexcept;
long recvmsg(int fd, msghdr* msg, int flags) noexcept;
long recvmmsg(int fd, mmsghdr* msgs, unsigned n, int flags, timespec* timeout) noexcept;
long send(int fd, const void* buf, size_t len, int flags) noexcept;
long sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
            socklen_t alen) noexcept;
long sendmsg(int fd, const msghdr* msg, int flags) noexcept;
long sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags) noexcept;
long sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept;
long sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) noexcept;
long splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
            unsigned flags) noexcept;

// ops_poll.cc: readiness
long poll(pollfd* fds, nfds_t n, int timeout) noexcept;
long poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) noexcept;
long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) noexcept;
long ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask,
               size_t fdslen) noexcept;
long select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) noexcept;
long pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
             const sigset_t* mask) noexcept;
long epoll_create(int size) noexcept;
long epoll_create1(int flags) noexcept;
long epoll_ctl(int epfd, int op, int fd, epoll_event* event) noexcept;
long epoll_wait(int epfd, epoll_event* events, int max, int timeout) noexcept;
long epoll_pwait(int epfd, epoll_event* events, int max, int timeout,
                 const sigset_t* mask) noexcept;
long epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout,
                  const sigset_t* mask) noexcept;

// ops_process.cc: fork and exec
long fork() noexcept;
long execve(const char* path, char* const argv[], char* const envp[]) noexcept;
long execv(const char* path, char* const argv[]) noexcept;
long execvp(const char* file, char* const argv[]) noexcept;
long execvpe(const char* file, char* const argv[], char* const envp[]) noexcept;
long fexecve(int fd, char* const argv[], char* const envp[]) noexcept;
long execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
              int flags) noexcept;

}  // namespace fastsock::ops
