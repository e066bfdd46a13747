// Data calls. A connection the kernel carries goes to the real entry point the application
// called, with its flags untouched; a connection on a link that carries data itself (shm,
// verbs) goes to that link's send/recv (see user_io.hpp). Either way the bytes moved are
// counted for `fastsock stat`.
#include <cstring>
#include <optional>

#include "fd_table.hpp"
#include "ops.hpp"
#include "real.hpp"
#include "result.hpp"
#include "transport.hpp"
#include "user_io.hpp"

namespace fastsock::ops {

namespace {

enum class Dir { sent, received };

void credit(Socket& s, Dir dir, uint64_t bytes) {
  auto& counter = dir == Dir::sent ? s.slot->bytes_sent : s.slot->bytes_received;
  counter.fetch_add(bytes, std::memory_order_relaxed);
}

// A link's adapter (`user`) needs the connection kept alive for the whole call: it runs
// under a counted reference, so a concurrent close cannot recycle the Socket mid-call. The
// kernel path only peeks (fd_table::peek): the real call needs nothing from the Socket, and
// the atomic increment and decrement of a reference were a measurable part of a 1-byte
// exchange's added cost. Returns the adapter's result, or nothing for the kernel path.
template <typename User>
inline std::optional<long> on_user_link(int fd, Socket* hint, User&& user) {
  if (!hint || !hint->user_io.load(std::memory_order_relaxed)) return std::nullopt;
  SocketRef s = fd_table::lookup(fd);
  if (!s || !user_link(*s)) return std::nullopt;  // moved to the kernel meanwhile
  return user(*s);
}

// Runs the real entry point (`kernel`) or the link's adapter (`user`, given the Socket) and
// credits the bytes moved to `fd`'s connection. `count` is false for MSG_PEEK: peeked bytes
// stay in the socket and are counted when really consumed.
template <Dir dir, typename Kernel, typename User>
inline long routed(int fd, bool count, Kernel&& kernel, User&& user) {
  Socket* hint = fd_table::peek(fd);
  const std::optional<long> by_link = on_user_link(fd, hint, user);
  const long rc = by_link ? *by_link : neg_errno(kernel());
  if (rc > 0 && hint && count) credit(*hint, dir, uint64_t(rc));
  return rc;
}

// For the *mmsg calls: the result is a message count; the bytes are in each msg_len.
template <Dir dir, typename Kernel, typename User>
inline long routed_mmsg(int fd, mmsghdr* msgs, bool peek, Kernel&& kernel, User&& user) {
  Socket* hint = fd_table::peek(fd);
  const std::optional<long> by_link = on_user_link(fd, hint, user);
  const long rc = by_link ? *by_link : neg_errno(kernel());
  if (rc > 0 && hint && !peek) {
    uint64_t bytes = 0;
    for (long i = 0; i < rc; ++i) bytes += msgs[i].msg_len;
    credit(*hint, dir, bytes);
  }
  return rc;
}

iovec one(const void* buf, size_t len) { return iovec{const_cast<void*>(buf), len}; }

// A connection whose descriptor goes to another process (SCM_RIGHTS) moves back to the
// kernel first: the receiving process gets a plain kernel socket, which it can use with
// or without the library.
void before_passing_descriptors(const msghdr* msg) {
  if (!msg || !msg->msg_control || msg->msg_controllen == 0) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(const_cast<msghdr*>(msg)); c;
       c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      downgrade_fd(fd, "descriptor passed to another process");
    }
  }
}

}  // namespace

long read(int fd, void* buf, size_t len) {
  return routed<Dir::received>(fd, true, [&] { return real().read(fd, buf, len); },
                               [&](Socket& s) {
                                 iovec v = one(buf, len);
                                 return user_recv(s, fd, &v, 1, 0);
                               });
}

long read_chk(int fd, void* buf, size_t len, size_t buflen) {
  // An overflowing read is a fortify failure whatever carries the data: the real
  // __read_chk reports it (and ends the program) before reading anything.
  if (len > buflen) return neg_errno(real().__read_chk(fd, buf, len, buflen));
  return ops::read(fd, buf, len);
}

long readv(int fd, const iovec* iov, int iovcnt) {
  return routed<Dir::received>(fd, true, [&] { return real().readv(fd, iov, iovcnt); },
                               [&](Socket& s) { return user_recv(s, fd, iov, iovcnt, 0); });
}

long write(int fd, const void* buf, size_t len) {
  return routed<Dir::sent>(fd, true, [&] { return real().write(fd, buf, len); },
                           [&](Socket& s) {
                             iovec v = one(buf, len);
                             return user_send(s, fd, &v, 1, 0);
                           });
}

long writev(int fd, const iovec* iov, int iovcnt) {
  return routed<Dir::sent>(fd, true, [&] { return real().writev(fd, iov, iovcnt); },
                           [&](Socket& s) { return user_send(s, fd, iov, iovcnt, 0); });
}

long recv(int fd, void* buf, size_t len, int flags) {
  return routed<Dir::received>(fd, !(flags & MSG_PEEK),
                               [&] { return real().recv(fd, buf, len, flags); },
                               [&](Socket& s) {
                                 iovec v = one(buf, len);
                                 return user_recv(s, fd, &v, 1, flags);
                               });
}

long recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags) {
  if (len > buflen) return neg_errno(real().__recv_chk(fd, buf, len, buflen, flags));
  return ops::recv(fd, buf, len, flags);
}

long recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* addr, socklen_t* alen) {
  return routed<Dir::received>(fd, !(flags & MSG_PEEK),
                               [&] { return real().recvfrom(fd, buf, len, flags, addr, alen); },
                               [&](Socket& s) {
                                 iovec v = one(buf, len);
                                 const long rc = user_recv(s, fd, &v, 1, flags);
                                 // TCP reports no source address: the kernel sets the
                                 // length to 0.
                                 if (rc >= 0 && addr && alen) *alen = 0;
                                 return rc;
                               });
}

long recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags, sockaddr* addr,
                  socklen_t* alen) {
  if (len > buflen)
    return neg_errno(real().__recvfrom_chk(fd, buf, len, buflen, flags, addr, alen));
  return ops::recvfrom(fd, buf, len, flags, addr, alen);
}

long recvmsg(int fd, msghdr* msg, int flags) {
  return routed<Dir::received>(fd, !(flags & MSG_PEEK),
                               [&] { return real().recvmsg(fd, msg, flags); },
                               [&](Socket& s) { return user_recvmsg(s, fd, msg, flags); });
}

long recvmmsg(int fd, mmsghdr* msgs, unsigned n, int flags, timespec* timeout) {
  return routed_mmsg<Dir::received>(
      fd, msgs, flags & MSG_PEEK, [&] { return real().recvmmsg(fd, msgs, n, flags, timeout); },
      [&](Socket& s) { return user_recvmmsg(s, fd, msgs, n, flags); });
}

long send(int fd, const void* buf, size_t len, int flags) {
  return routed<Dir::sent>(fd, true, [&] { return real().send(fd, buf, len, flags); },
                           [&](Socket& s) {
                             iovec v = one(buf, len);
                             return user_send(s, fd, &v, 1, flags);
                           });
}

long sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
            socklen_t alen) {
  // A connected TCP socket ignores the destination address.
  return routed<Dir::sent>(fd, true,
                           [&] { return real().sendto(fd, buf, len, flags, addr, alen); },
                           [&](Socket& s) {
                             iovec v = one(buf, len);
                             return user_send(s, fd, &v, 1, flags);
                           });
}

long sendmsg(int fd, const msghdr* msg, int flags) {
  before_passing_descriptors(msg);
  return routed<Dir::sent>(fd, true, [&] { return real().sendmsg(fd, msg, flags); },
                           [&](Socket& s) {
                             return user_send(s, fd, msg->msg_iov, int(msg->msg_iovlen), flags);
                           });
}

bool passes_control_data(const mmsghdr* msgs, unsigned n) noexcept {
  for (unsigned i = 0; i < n; ++i)
    if (msgs[i].msg_hdr.msg_controllen) return true;
  return false;
}

long sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags) {
  for (unsigned i = 0; i < n; ++i) before_passing_descriptors(&msgs[i].msg_hdr);
  return routed_mmsg<Dir::sent>(fd, msgs, false,
                                [&] { return real().sendmmsg(fd, msgs, n, flags); },
                                [&](Socket& s) { return user_sendmmsg(s, fd, msgs, n, flags); });
}

long sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return routed<Dir::sent>(out_fd, true,
                           [&] { return real().sendfile(out_fd, in_fd, offset, count); },
                           [&](Socket& s) { return user_sendfile(s, out_fd, in_fd, offset, count); });
}

long sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  static_assert(sizeof(off64_t) == sizeof(off_t), "64-bit glibc: off_t is off64_t");
  return routed<Dir::sent>(out_fd, true,
                           [&] { return real().sendfile64(out_fd, in_fd, offset, count); },
                           [&](Socket& s) {
                             return user_sendfile(s, out_fd, in_fd,
                                                  reinterpret_cast<off_t*>(offset), count);
                           });
}

long splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
            unsigned flags) {
  // Either end may be a tracked socket: the bytes leave one and enter the other.
  SocketRef in = fd_table::lookup(fd_in);
  SocketRef out = fd_table::lookup(fd_out);
  long rc;
  if (in && user_link(*in))
    rc = user_splice_from(*in, fd_in, fd_out, off_out, len, flags);
  else if (out && user_link(*out))
    rc = user_splice_to(*out, fd_out, fd_in, off_in, len, flags);
  else
    rc = neg_errno(real().splice(fd_in, off_in, fd_out, off_out, len, flags));
  if (rc > 0 && in) credit(*in, Dir::received, uint64_t(rc));
  if (rc > 0 && out) credit(*out, Dir::sent, uint64_t(rc));
  return rc;
}

}  // namespace fastsock::ops
