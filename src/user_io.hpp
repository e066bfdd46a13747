// The data calls for connections whose link carries the data itself (shm, verbs), as the
// kernel would perform them on a TCP socket: every call shape (read, recvmsg, sendmmsg,
// sendfile, splice, ...) is reduced to the link's send/recv over an iovec, with the
// argument checks, SIGPIPE and stream-socket conventions of the kernel applied here once.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "socket.hpp"

namespace fastsock::ops {

// The link that carries `s`'s data, or nullptr when the kernel does.
inline Transport* user_link(const Socket& s) noexcept {
  return s.user_io.load(std::memory_order_relaxed) ? s.link : nullptr;
}

long user_recv(Socket& s, int fd, const iovec* iov, int iovcnt, int flags);
long user_send(Socket& s, int fd, const iovec* iov, int iovcnt, int flags);
long user_recvmsg(Socket& s, int fd, msghdr* msg, int flags);
long user_recvmmsg(Socket& s, int fd, mmsghdr* msgs, unsigned n, int flags);
long user_sendmmsg(Socket& s, int fd, mmsghdr* msgs, unsigned n, int flags);
long user_sendfile(Socket& s, int out_fd, int in_fd, off_t* offset, size_t count);
// splice with the socket as the source (into the pipe `pipe_out`) or the destination.
long user_splice_from(Socket& s, int fd, int pipe_out, loff_t* off_out, size_t len,
                      unsigned flags);
long user_splice_to(Socket& s, int fd, int pipe_in, loff_t* off_in, size_t len,
                    unsigned flags);
// ioctl FIONREAD/SIOCINQ.
long user_bytes_readable(Socket& s, int fd);

// Hands the connection behind `fd` back to the kernel if a link carries it, because the
// descriptor is about to be used where the link cannot follow (stdio, another process).
// errno is left as it was.
void downgrade_fd(int fd, const char* why) noexcept;

}  // namespace fastsock::ops
