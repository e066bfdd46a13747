// Readiness. The kernel socket carries every connection of this build, so the kernel's own
// readiness is exact and these go straight to it. Transports that carry data outside the
// kernel (shm, verbs) will merge their readiness here, through Transport::readiness_fd.
#include "ops.hpp"
#include "real.hpp"
#include "result.hpp"

namespace fastsock::ops {

long poll(pollfd* fds, nfds_t n, int timeout) {
  return neg_errno(real().poll(fds, n, timeout));
}

long poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  return neg_errno(real().__poll_chk(fds, n, timeout, fdslen));
}

long ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  return neg_errno(real().ppoll(fds, n, timeout, mask));
}

long ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask,
               size_t fdslen) {
  return neg_errno(real().__ppoll_chk(fds, n, timeout, mask, fdslen));
}

long select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  return neg_errno(real().select(n, r, w, e, timeout));
}

long pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
             const sigset_t* mask) {
  return neg_errno(real().pselect(n, r, w, e, timeout, mask));
}

long epoll_create(int size) { return neg_errno(real().epoll_create(size)); }

long epoll_create1(int flags) { return neg_errno(real().epoll_create1(flags)); }

long epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  return neg_errno(real().epoll_ctl(epfd, op, fd, event));
}

long epoll_wait(int epfd, epoll_event* events, int max, int timeout) {
  return neg_errno(real().epoll_wait(epfd, events, max, timeout));
}

long epoll_pwait(int epfd, epoll_event* events, int max, int timeout,
                 const sigset_t* mask) {
  return neg_errno(real().epoll_pwait(epfd, events, max, timeout, mask));
}

long epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout,
                  const sigset_t* mask) {
  return neg_errno(real().epoll_pwait2(epfd, events, max, timeout, mask));
}

}  // namespace fastsock::ops
