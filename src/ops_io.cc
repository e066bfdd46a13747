// Data calls. Every connection of this build is carried by the kernel socket, so each call
// goes to the real entry point the application called, with its flags untouched, and the
// bytes it moved are counted for `fastsock stat`.
#include "fd_table.hpp"
#include "ops.hpp"
#include "real.hpp"
#include "result.hpp"

namespace fastsock::ops {

namespace {

enum class Dir { sent, received };

// Runs `call` (the real entry point) and credits the bytes it moved to `fd`'s connection.
// The lookup comes first so that a concurrent close cannot recycle the Socket mid-call.
template <Dir dir, typename Call>
inline long counted(int fd, Call&& call) {
  SocketRef s = fd_table::lookup(fd);
  const long rc = neg_errno(call());
  if (rc > 0 && s) {
    auto& counter = dir == Dir::sent ? s->slot->bytes_sent : s->slot->bytes_received;
    counter.fetch_add(uint64_t(rc), std::memory_order_relaxed);
  }
  return rc;
}

// MSG_PEEK leaves the bytes in the socket: they are counted when really consumed.
template <typename Call>
inline long counted_recv(int fd, int flags, Call&& call) {
  if (flags & MSG_PEEK) return neg_errno(call());
  return counted<Dir::received>(fd, call);
}

// For the *mmsg calls: the result is a message count; the bytes are in each msg_len.
template <Dir dir, typename Call>
inline long counted_mmsg(int fd, mmsghdr* msgs, bool peek, Call&& call) {
  SocketRef s = fd_table::lookup(fd);
  const long rc = neg_errno(call());
  if (rc > 0 && s && !peek) {
    uint64_t bytes = 0;
    for (long i = 0; i < rc; ++i) bytes += msgs[i].msg_len;
    auto& counter = dir == Dir::sent ? s->slot->bytes_sent : s->slot->bytes_received;
    counter.fetch_add(bytes, std::memory_order_relaxed);
  }
  return rc;
}

}  // namespace

long read(int fd, void* buf, size_t len) {
  return counted<Dir::received>(fd, [&] { return real().read(fd, buf, len); });
}

long read_chk(int fd, void* buf, size_t len, size_t buflen) {
  return counted<Dir::received>(fd, [&] { return real().__read_chk(fd, buf, len, buflen); });
}

long readv(int fd, const iovec* iov, int iovcnt) {
  return counted<Dir::received>(fd, [&] { return real().readv(fd, iov, iovcnt); });
}

long write(int fd, const void* buf, size_t len) {
  return counted<Dir::sent>(fd, [&] { return real().write(fd, buf, len); });
}

long writev(int fd, const iovec* iov, int iovcnt) {
  return counted<Dir::sent>(fd, [&] { return real().writev(fd, iov, iovcnt); });
}

long recv(int fd, void* buf, size_t len, int flags) {
  return counted_recv(fd, flags, [&] { return real().recv(fd, buf, len, flags); });
}

long recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags) {
  return counted_recv(fd, flags, [&] { return real().__recv_chk(fd, buf, len, buflen, flags); });
}

long recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* addr, socklen_t* alen) {
  return counted_recv(fd, flags, [&] { return real().recvfrom(fd, buf, len, flags, addr, alen); });
}

long recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags, sockaddr* addr,
                  socklen_t* alen) {
  return counted_recv(fd, flags, [&] {
    return real().__recvfrom_chk(fd, buf, len, buflen, flags, addr, alen);
  });
}

long recvmsg(int fd, msghdr* msg, int flags) {
  return counted_recv(fd, flags, [&] { return real().recvmsg(fd, msg, flags); });
}

long recvmmsg(int fd, mmsghdr* msgs, unsigned n, int flags, timespec* timeout) {
  return counted_mmsg<Dir::received>(fd, msgs, flags & MSG_PEEK,
                                     [&] { return real().recvmmsg(fd, msgs, n, flags, timeout); });
}

long send(int fd, const void* buf, size_t len, int flags) {
  return counted<Dir::sent>(fd, [&] { return real().send(fd, buf, len, flags); });
}

long sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
            socklen_t alen) {
  return counted<Dir::sent>(fd, [&] { return real().sendto(fd, buf, len, flags, addr, alen); });
}

long sendmsg(int fd, const msghdr* msg, int flags) {
  return counted<Dir::sent>(fd, [&] { return real().sendmsg(fd, msg, flags); });
}

long sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags) {
  return counted_mmsg<Dir::sent>(fd, msgs, false,
                                 [&] { return real().sendmmsg(fd, msgs, n, flags); });
}

long sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return counted<Dir::sent>(out_fd, [&] { return real().sendfile(out_fd, in_fd, offset, count); });
}

long sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  return counted<Dir::sent>(out_fd,
                            [&] { return real().sendfile64(out_fd, in_fd, offset, count); });
}

long splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
            unsigned flags) {
  // Either end may be a tracked socket: the bytes leave one and enter the other.
  SocketRef in = fd_table::lookup(fd_in);
  return counted<Dir::sent>(fd_out, [&] {
    const ssize_t rc = real().splice(fd_in, off_in, fd_out, off_out, len, flags);
    if (rc > 0 && in) in->slot->bytes_received.fetch_add(uint64_t(rc), std::memory_order_relaxed);
    return rc;
  });
}

}  // namespace fastsock::ops
