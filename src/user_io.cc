#include "user_io.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>

#include "cancel_point.hpp"
#include "fd_table.hpp"
#include "real.hpp"
#include "result.hpp"
#include "transport.hpp"

namespace fastsock::ops {

namespace {

// The kernel's checks on an iovec, so a bad argument fails the same way on every link.
long check_iov(const iovec* iov, int iovcnt) {
  if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) {
    if (iov[i].iov_len > size_t(SSIZE_MAX) - total) return -EINVAL;
    total += iov[i].iov_len;
  }
  return 0;
}

// A write to a connection that can no longer send raises SIGPIPE in the calling thread,
// as the kernel does, unless the caller asked for MSG_NOSIGNAL.
void raise_sigpipe(int flags) {
  if (!(flags & MSG_NOSIGNAL)) ::syscall(SYS_tgkill, getpid(), gettid(), SIGPIPE);
}

// Bounce buffer of the calls whose other end is a file or a pipe.
constexpr size_t kBounceSize = 64 * 1024;
struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Bounce = std::unique_ptr<char, FreeDeleter>;
Bounce bounce() { return Bounce(static_cast<char*>(std::malloc(kBounceSize))); }

// A link that found the connection reset says so on every call; the kernel reports the
// reset once, then fails sends with EPIPE and ends reads (0). `after` is what a repeat
// becomes.
long as_after_reset(Socket& s, long rc, long after) {
  if (rc != -ECONNRESET) return rc;
  return s.reset_reported.exchange(true, std::memory_order_relaxed) ? after : rc;
}

// Every call into the link goes through these two, so that every entry point (send,
// sendfile, splice, ...) reports a reset the kernel's way.
long link_send(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) {
  return as_after_reset(s, s.link->send(s, fd, iov, iovcnt, flags), -EPIPE);
}
long link_recv(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) {
  return as_after_reset(s, s.link->recv(s, fd, iov, iovcnt, flags), 0);
}

// Sleeps until the link reports one of `events` (or an error or hang-up), or a signal.
FASTSOCK_CANCELLATION_POINT
void wait_for_link(Socket& s, int fd, short events) {
  const short done = short(events | POLLERR | POLLHUP);
  if (s.link->poll_now(s, fd, events) & done) return;
  pollfd w[Transport::kMaxWaitFds];
  const int n = s.link->wait_fds(s, fd, events, w);
  // Armed now: anything that happens from here on wakes the poll below.
  if (!(s.link->poll_now(s, fd, events) & done)) (void)real().poll(w, nfds_t(n), -1);
  s.link->disarm(s, Transport::WakeWatch::level);
}

// Sends all `len` bytes, waiting for room even on a non-blocking socket: the bytes were
// already taken from a file position or a pipe and must not be lost.
long send_all(Socket& s, int fd, const char* buf, size_t len) {
  size_t sent = 0;
  while (sent < len) {
    iovec v{const_cast<char*>(buf + sent), len - sent};
    long rc = link_send(s, fd, &v, 1, MSG_NOSIGNAL);
    if (rc == -EAGAIN) {  // a non-blocking socket is full: wait for room
      wait_for_link(s, fd, POLLOUT);
      continue;
    }
    if (rc < 0) {
      if (rc == -EPIPE) raise_sigpipe(0);
      return sent ? long(sent) : rc;
    }
    sent += size_t(rc);
  }
  return long(sent);
}

bool is_pipe(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

long user_recv(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) {
  if (long rc = check_iov(iov, iovcnt); rc < 0) return rc;
  return link_recv(s, fd, iov, iovcnt, flags);
}

long user_send(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) {
  if (long rc = check_iov(iov, iovcnt); rc < 0) return rc;
  const long rc = link_send(s, fd, iov, iovcnt, flags);
  if (rc == -EPIPE) raise_sigpipe(flags);
  return rc;
}

long user_recvmsg(Socket& s, int fd, msghdr* msg, int flags) {
  if (msg->msg_iovlen > size_t(IOV_MAX)) return -EMSGSIZE;
  const long rc = user_recv(s, fd, msg->msg_iov, int(msg->msg_iovlen), flags);
  if (rc >= 0) {
    // A TCP stream has no source address, no ancillary data here, no record boundaries.
    msg->msg_namelen = 0;
    msg->msg_controllen = 0;
    msg->msg_flags = 0;
  }
  return rc;
}

long user_recvmmsg(Socket& s, int fd, mmsghdr* msgs, unsigned n, int flags) {
  if (n == 0) return 0;
  unsigned done = 0;
  int f = flags & ~MSG_WAITFORONE;
  for (; done < n; ++done) {
    const long rc = user_recvmsg(s, fd, &msgs[done].msg_hdr, f);
    if (rc < 0) return done ? long(done) : rc;  // the kernel also reports the count first
    msgs[done].msg_len = unsigned(rc);
    if (rc == 0) return long(done + 1);         // end of stream
    if (flags & MSG_WAITFORONE) f |= MSG_DONTWAIT;
  }
  return long(done);
}

long user_sendmmsg(Socket& s, int fd, mmsghdr* msgs, unsigned n, int flags) {
  unsigned done = 0;
  for (; done < n; ++done) {
    const msghdr& m = msgs[done].msg_hdr;
    if (m.msg_iovlen > size_t(IOV_MAX)) return done ? long(done) : -EMSGSIZE;
    const long rc = user_send(s, fd, m.msg_iov, int(m.msg_iovlen), flags);
    if (rc < 0) return done ? long(done) : rc;
    msgs[done].msg_len = unsigned(rc);
  }
  return long(done);
}

long user_sendfile(Socket& s, int out_fd, int in_fd, off_t* offset, size_t count) {
  Bounce buf = bounce();
  if (!buf) return -ENOMEM;
  const size_t want = std::min(count, kBounceSize);
  const ssize_t got = offset ? pread(in_fd, buf.get(), want, *offset)
                             : real().read(in_fd, buf.get(), want);
  if (got <= 0) return got == 0 ? 0 : -errno;
  iovec v{buf.get(), size_t(got)};
  long sent = link_send(s, out_fd, &v, 1, MSG_NOSIGNAL);
  if (sent == -EPIPE) raise_sigpipe(0);
  const size_t kept = sent > 0 ? size_t(sent) : 0;
  // The file position (or *offset) advances by what was sent, as with the kernel's sendfile.
  if (offset)
    *offset += off_t(kept);
  else if (kept < size_t(got))
    (void)lseek(in_fd, -off_t(size_t(got) - kept), SEEK_CUR);
  return sent < 0 ? sent : long(kept);
}

long user_splice_from(Socket& s, int fd, int pipe_out, loff_t* off_out, size_t len,
                      unsigned flags) {
  if (!is_pipe(pipe_out)) return -EINVAL;  // splice needs a pipe at one end
  if (off_out) return -ESPIPE;
  // Take no more than the pipe can hold now, so that writing it cannot block or fail.
  const int pipe_size = real().fcntl(pipe_out, F_GETPIPE_SZ);
  int queued = 0;
  if (pipe_size < 0 || real().ioctl(pipe_out, FIONREAD, &queued) != 0) return -errno;
  size_t room = size_t(std::max(pipe_size - queued, 0));
  if (room == 0) return (flags & SPLICE_F_NONBLOCK) ? -EAGAIN : 0;
  Bounce buf = bounce();
  if (!buf) return -ENOMEM;
  iovec v{buf.get(), std::min({len, room, kBounceSize})};
  const long got = link_recv(s, fd, &v, 1, (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0);
  if (got <= 0) return got;
  size_t put = 0;
  while (put < size_t(got)) {
    const ssize_t w = real().write(pipe_out, buf.get() + put, size_t(got) - put);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return put ? long(put) : -errno;  // the reader closed the pipe
    put += size_t(w);
  }
  return long(put);
}

long user_splice_to(Socket& s, int fd, int pipe_in, loff_t* off_in, size_t len,
                    unsigned flags) {
  if (!is_pipe(pipe_in)) return -EINVAL;
  if (off_in) return -ESPIPE;
  Bounce buf = bounce();
  if (!buf) return -ENOMEM;
  // A blocking pipe read waits for data like splice does; SPLICE_F_NONBLOCK asks not to.
  ssize_t got;
  if (flags & SPLICE_F_NONBLOCK) {
    int queued = 0;
    if (real().ioctl(pipe_in, FIONREAD, &queued) != 0) return -errno;
    if (queued == 0) return -EAGAIN;
    got = real().read(pipe_in, buf.get(), std::min({len, size_t(queued), kBounceSize}));
  } else {
    got = real().read(pipe_in, buf.get(), std::min(len, kBounceSize));
  }
  if (got <= 0) return got == 0 ? 0 : -errno;
  return send_all(s, fd, buf.get(), size_t(got));
}

long user_bytes_readable(Socket& s, int fd) { return s.link->bytes_readable(s, fd); }

void downgrade_fd(int fd, const char* why) noexcept {
  if (!fd_table::maybe_tracked(fd)) return;
  const int saved_errno = errno;
  SocketRef s = fd_table::lookup(fd);
  if (s && user_link(*s)) s->link->downgrade(*s, fd, why);
  errno = saved_errno;
}

}  // namespace fastsock::ops
