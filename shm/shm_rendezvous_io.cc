#include "shm_rendezvous_io.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "internal_fds.hpp"
#include "real.hpp"
#include "shm_rendezvous.hpp"

namespace fastsock::shm {

int send_message(int fd, const void* buf, size_t len, const int* fds, int count,
                 const struct ucred* creds) noexcept {
  if (count < 0 || count > kMaxPassedFds) return -EINVAL;
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(struct ucred)) +
                                CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  if (count > 0 || creds) {
    memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = (creds ? CMSG_SPACE(sizeof(struct ucred)) : 0) +
                         (count > 0 ? CMSG_SPACE(sizeof(int) * size_t(count)) : 0);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (creds) {
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_CREDENTIALS;
      c->cmsg_len = CMSG_LEN(sizeof(struct ucred));
      memcpy(CMSG_DATA(c), creds, sizeof(struct ucred));
      c = CMSG_NXTHDR(&msg, c);
    }
    if (count > 0) {
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * size_t(count));
      memcpy(CMSG_DATA(c), fds, sizeof(int) * size_t(count));
    }
  }
  for (;;) {
    const ssize_t n = real().sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return n == ssize_t(len) ? 0 : -EMSGSIZE;
    if (errno != EINTR) return -errno;
  }
}

namespace {

// The Received of a message of `n` bytes the kernel delivered into `msg`.
void fill_received(const msghdr& msg, ssize_t n, Received& out) noexcept {
  out.len = n;
  out.truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  out.ctrunc = (msg.msg_flags & MSG_CTRUNC) != 0;
  out.control = ControlData{};
  parse_control(msg, out.control);
  for (int i = 0; i < out.control.fd_count; ++i)
    out.control.fds[i] = internal_fds::relocate(out.control.fds[i]);
  if (n == 0) {
    // An empty message reads like the end of the stream, and every caller treats it so:
    // the descriptors a peer may have attached to it are closed here.
    close_fds(out.control.fds, out.control.fd_count);
    out.control = ControlData{};
  }
}

}  // namespace

int recv_two_messages(int fd, void* const bufs[2], size_t cap, Received out[2]) noexcept {
  iovec iov[2];
  mmsghdr msgs[2];
  alignas(cmsghdr) char control[2][kControlBytes];
  memset(msgs, 0, sizeof msgs);
  for (int i = 0; i < 2; ++i) {
    iov[i] = iovec{bufs[i], cap};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_control = control[i];
    msgs[i].msg_hdr.msg_controllen = sizeof control[i];
  }
  const int n = real().recvmmsg(fd, msgs, 2, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, nullptr);
  if (n < 0) {
    const int err = errno;
    out[0] = Received{};
    out[0].len = -err;
    // Interrupted: the one-message path retries. A reset (reported once, see
    // recv_message) may have what the peer sent before closing queued behind it.
    if (err == EINTR || err == ECONNRESET) {
      recv_message(fd, bufs[0], cap, out[0]);
      if (err == ECONNRESET && out[0].len == -EAGAIN) out[0].len = 0;
    }
    return 1;
  }
  for (int i = 0; i < n; ++i) fill_received(msgs[i].msg_hdr, ssize_t(msgs[i].msg_len), out[i]);
  return n;
}

void recv_message(int fd, void* buf, size_t cap, Received& out) noexcept {
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[kControlBytes];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  bool reset_seen = false;
  for (;;) {
    n = real().recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n >= 0 || errno == EINTR) {
      if (n >= 0) break;
      continue;
    }
    // A peer that closed with messages of ours unread (an acceptor that matched before our
    // `where` came, then closed its listener) makes the kernel report ECONNRESET first, once:
    // what it sent before closing is still queued behind it (the reply), then the end.
    if (errno != ECONNRESET || reset_seen) break;
    reset_seen = true;
  }
  if (n < 0) {
    out = Received{};
    out.len = errno == ECONNRESET || (reset_seen && errno == EAGAIN) ? 0 : -errno;
    return;
  }
  fill_received(msg, n, out);
}

void close_fds(const int* fds, int count) noexcept {
  for (int i = 0; i < count; ++i)
    if (fds[i] >= 0) real().close(fds[i]);
}

// PassedFds ---------------------------------------------------------------------------

PassedFds::PassedFds(PassedFds&& o) noexcept { *this = static_cast<PassedFds&&>(o); }

PassedFds& PassedFds::operator=(PassedFds&& o) noexcept {
  if (this != &o) {
    reset();
    memcpy(fds_, o.fds_, sizeof fds_);
    count_ = o.count_;
    o.count_ = 0;
    for (int& fd : o.fds_) fd = -1;
  }
  return *this;
}

int PassedFds::take(int i) noexcept {
  if (i < 0 || i >= count_) return -1;
  const int fd = fds_[i];
  fds_[i] = -1;
  return fd;
}

void PassedFds::reset() noexcept {
  close_fds(fds_, count_);
  for (int& fd : fds_) fd = -1;
  count_ = 0;
}

void PassedFds::adopt(const int* fds, int n) noexcept {
  reset();
  if (n < 0) n = 0;
  if (n > kMaxPassedFds) n = kMaxPassedFds;
  memcpy(fds_, fds, sizeof(int) * size_t(n));
  count_ = n;
}

}  // namespace fastsock::shm
