// Readiness. A set of kernel descriptors only goes straight to the kernel. A set with a
// connection whose link carries data outside the kernel (shm, verbs) goes through
// poll_merged (poll_merge.hpp); select and pselect are turned into that poll for it. An
// epoll set holding such a connection goes through epoll_merge.hpp.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>

#include "epoll_merge.hpp"
#include "fd_table.hpp"
#include "ops.hpp"
#include "poll_merge.hpp"
#include "real.hpp"
#include "result.hpp"
#include "user_io.hpp"

namespace fastsock::ops {

namespace {

timespec from_ms(int ms) { return timespec{ms / 1000, long(ms % 1000) * 1'000'000}; }

// Whether any descriptor in the select sets is a user-link connection.
bool sets_have_user_link(int n, const fd_set* r, const fd_set* w, const fd_set* e) {
  for (int fd = 0; fd < n; ++fd) {
    if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))))
      continue;
    if (!fd_table::maybe_tracked(fd)) continue;
    SocketRef s = fd_table::lookup(fd);
    if (s && user_link(*s)) return true;
  }
  return false;
}

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// select's meaning in poll's terms, as the kernel defines it: readable = POLLIN, POLLHUP
// or POLLERR; writable = POLLOUT or POLLERR; exceptional = POLLPRI.
long select_via_poll(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
                     const sigset_t* mask) {
  if (n < 0 || n > FD_SETSIZE) return -EINVAL;
  std::unique_ptr<pollfd[], FreeDeleter> fds(
      static_cast<pollfd*>(std::calloc(size_t(std::max(n, 1)), sizeof(pollfd))));
  if (!fds) return -ENOMEM;
  nfds_t count = 0;
  for (int fd = 0; fd < n; ++fd) {
    short ev = 0;
    if (r && FD_ISSET(fd, r)) ev |= POLLIN;
    if (w && FD_ISSET(fd, w)) ev |= POLLOUT;
    if (e && FD_ISSET(fd, e)) ev |= POLLPRI;
    if (ev) fds[count++] = pollfd{fd, ev, 0};
  }
  const long rc = poll_merged(fds.get(), count, timeout, mask);
  if (rc < 0) return rc;
  for (nfds_t i = 0; i < count; ++i)
    if (fds[i].revents & POLLNVAL) return -EBADF;
  if (r) FD_ZERO(r);
  if (w) FD_ZERO(w);
  if (e) FD_ZERO(e);
  long bits = 0;
  for (nfds_t i = 0; i < count; ++i) {
    const int fd = fds[i].fd;
    const short ev = fds[i].events, rev = fds[i].revents;
    if ((ev & POLLIN) && (rev & (POLLIN | POLLHUP | POLLERR))) { FD_SET(fd, r); ++bits; }
    if ((ev & POLLOUT) && (rev & (POLLOUT | POLLERR))) { FD_SET(fd, w); ++bits; }
    if ((ev & POLLPRI) && (rev & POLLPRI)) { FD_SET(fd, e); ++bits; }
  }
  return bits;
}

}  // namespace

long poll(pollfd* fds, nfds_t n, int timeout) {
  epoll_merge::refresh_polled(fds, n);
  if (!has_user_link(fds, n)) return neg_errno(real().poll(fds, n, timeout));
  const timespec t = from_ms(timeout);
  return poll_merged(fds, n, timeout < 0 ? nullptr : &t, nullptr);
}

long poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  if (fdslen / sizeof(pollfd) >= n) epoll_merge::refresh_polled(fds, n);
  if (fdslen / sizeof(pollfd) < n || !has_user_link(fds, n))
    return neg_errno(real().__poll_chk(fds, n, timeout, fdslen));  // (reports an overflow)
  return ops::poll(fds, n, timeout);
}

long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  epoll_merge::refresh_polled(fds, n);
  if (!has_user_link(fds, n)) return neg_errno(real().ppoll(fds, n, timeout, mask));
  return poll_merged(fds, n, timeout, mask);
}

long ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask,
               size_t fdslen) {
  if (fdslen / sizeof(pollfd) >= n) epoll_merge::refresh_polled(fds, n);
  if (fdslen / sizeof(pollfd) < n || !has_user_link(fds, n))
    return neg_errno(real().__ppoll_chk(fds, n, timeout, mask, fdslen));
  return poll_merged(fds, n, timeout, mask);
}

long select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  epoll_merge::refresh_selected(n, r);
  if (!sets_have_user_link(n, r, w, e)) return neg_errno(real().select(n, r, w, e, timeout));
  timespec t;
  if (timeout) t = timespec{timeout->tv_sec, timeout->tv_usec * 1000};
  // (Linux's select also writes back the time left; programs may not rely on it and this
  // path leaves *timeout unchanged.)
  return select_via_poll(n, r, w, e, timeout ? &t : nullptr, nullptr);
}

long pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
             const sigset_t* mask) {
  epoll_merge::refresh_selected(n, r);
  if (!sets_have_user_link(n, r, w, e))
    return neg_errno(real().pselect(n, r, w, e, timeout, mask));
  return select_via_poll(n, r, w, e, timeout, mask);
}

long epoll_create(int size) { return neg_errno(real().epoll_create(size)); }

long epoll_create1(int flags) { return neg_errno(real().epoll_create1(flags)); }

long epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  if (long rc; epoll_merge::ctl(epfd, op, fd, event, &rc)) return rc;
  return neg_errno(real().epoll_ctl(epfd, op, fd, event));
}

long epoll_wait(int epfd, epoll_event* events, int max, int timeout) {
  epoll_merge::refresh_nested(epfd);
  const timespec t = from_ms(timeout);
  if (long rc; epoll_merge::wait(epfd, events, max, timeout < 0 ? nullptr : &t, nullptr, &rc))
    return rc;
  return neg_errno(real().epoll_wait(epfd, events, max, timeout));
}

long epoll_pwait(int epfd, epoll_event* events, int max, int timeout,
                 const sigset_t* mask) {
  epoll_merge::refresh_nested(epfd);
  const timespec t = from_ms(timeout);
  if (long rc; epoll_merge::wait(epfd, events, max, timeout < 0 ? nullptr : &t, mask, &rc))
    return rc;
  return neg_errno(real().epoll_pwait(epfd, events, max, timeout, mask));
}

long epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout,
                  const sigset_t* mask) {
  epoll_merge::refresh_nested(epfd);
  if (long rc; epoll_merge::wait(epfd, events, max, timeout, mask, &rc)) return rc;
  return neg_errno(real().epoll_pwait2(epfd, events, max, timeout, mask));
}

}  // namespace fastsock::ops
