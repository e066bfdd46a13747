// Exported hooks: data, including the _FORTIFY_SOURCE (__*_chk) and *64 variants.
// Each first rules out, with two loads, that the descriptor is a tracked socket, and then
// calls libc directly: files, pipes and untracked sockets pay nothing else (the overhead
// benchmark's file I/O target is 2%).
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <unistd.h>

#include "fd_table.hpp"
#include "hook.hpp"
#include "real.hpp"

using namespace fastsock;

FASTSOCK_HOOK ssize_t read(int fd, void* buf, size_t len) {
  if (!fd_table::maybe_tracked(fd)) return real().read(fd, buf, len);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::read(fd, buf, len));
}
FASTSOCK_HOOK ssize_t __read_chk(int fd, void* buf, size_t len, size_t buflen) {
  if (!fd_table::maybe_tracked(fd)) return real().__read_chk(fd, buf, len, buflen);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::read_chk(fd, buf, len, buflen));
}
FASTSOCK_HOOK ssize_t readv(int fd, const iovec* iov, int iovcnt) {
  if (!fd_table::maybe_tracked(fd)) return real().readv(fd, iov, iovcnt);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::readv(fd, iov, iovcnt));
}
FASTSOCK_HOOK ssize_t write(int fd, const void* buf, size_t len) {
  if (!fd_table::maybe_tracked(fd)) return real().write(fd, buf, len);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::write(fd, buf, len));
}
FASTSOCK_HOOK ssize_t writev(int fd, const iovec* iov, int iovcnt) {
  if (!fd_table::maybe_tracked(fd)) return real().writev(fd, iov, iovcnt);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::writev(fd, iov, iovcnt));
}
FASTSOCK_HOOK ssize_t recv(int fd, void* buf, size_t len, int flags) {
  if (!fd_table::maybe_tracked(fd)) return real().recv(fd, buf, len, flags);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::recv(fd, buf, len, flags));
}
FASTSOCK_HOOK ssize_t __recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags) {
  if (!fd_table::maybe_tracked(fd)) return real().__recv_chk(fd, buf, len, buflen, flags);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::recv_chk(fd, buf, len, buflen, flags));
}
FASTSOCK_HOOK ssize_t recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* addr,
                               socklen_t* alen) {
  if (!fd_table::maybe_tracked(fd)) return real().recvfrom(fd, buf, len, flags, addr, alen);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::recvfrom(fd, buf, len, flags, addr, alen));
}
FASTSOCK_HOOK ssize_t __recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags,
                                     sockaddr* addr, socklen_t* alen) {
  if (!fd_table::maybe_tracked(fd)) return real().__recvfrom_chk(fd, buf, len, buflen, flags, addr, alen);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::recvfrom_chk(fd, buf, len, buflen, flags, addr, alen));
}
FASTSOCK_HOOK ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  if (!fd_table::maybe_tracked(fd)) return real().recvmsg(fd, msg, flags);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::recvmsg(fd, msg, flags));
}
FASTSOCK_HOOK int recvmmsg(int fd, mmsghdr* msgs, unsigned n, int flags, timespec* timeout) {
  if (!fd_table::maybe_tracked(fd)) return real().recvmmsg(fd, msgs, n, flags, timeout);
  FASTSOCK_RETURN_DIRECT(int, ops::recvmmsg(fd, msgs, n, flags, timeout));
}
FASTSOCK_HOOK ssize_t send(int fd, const void* buf, size_t len, int flags) {
  if (!fd_table::maybe_tracked(fd)) return real().send(fd, buf, len, flags);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::send(fd, buf, len, flags));
}
FASTSOCK_HOOK ssize_t sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
                             socklen_t alen) {
  if (!fd_table::maybe_tracked(fd)) return real().sendto(fd, buf, len, flags, addr, alen);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::sendto(fd, buf, len, flags, addr, alen));
}
FASTSOCK_HOOK ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  // (Ancillary data may pass descriptors, on any socket: then the core must see it.)
  if (!fd_table::maybe_tracked(fd) && (!msg || !msg->msg_controllen))
    return real().sendmsg(fd, msg, flags);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::sendmsg(fd, msg, flags));
}
FASTSOCK_HOOK int sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags) {
  if (!fd_table::maybe_tracked(fd) && !ops::passes_control_data(msgs, n))
    return real().sendmmsg(fd, msgs, n, flags);
  FASTSOCK_RETURN_DIRECT(int, ops::sendmmsg(fd, msgs, n, flags));
}
FASTSOCK_HOOK ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  if (!fd_table::maybe_tracked(out_fd)) return real().sendfile(out_fd, in_fd, offset, count);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::sendfile(out_fd, in_fd, offset, count));
}
FASTSOCK_HOOK ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) noexcept {
  if (!fd_table::maybe_tracked(out_fd)) return real().sendfile64(out_fd, in_fd, offset, count);
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::sendfile64(out_fd, in_fd, offset, count));
}
FASTSOCK_HOOK ssize_t splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
                             unsigned flags) {
  FASTSOCK_RETURN_DIRECT(ssize_t, ops::splice(fd_in, off_in, fd_out, off_out, len, flags));
}
