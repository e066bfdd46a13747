// Exported hooks: readiness.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "hook.hpp"

using namespace fastsock;

FASTSOCK_HOOK int poll(pollfd* fds, nfds_t n, int timeout) {
  FASTSOCK_RETURN_DIRECT(int, ops::poll(fds, n, timeout));
}
FASTSOCK_HOOK int __poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
  FASTSOCK_RETURN_DIRECT(int, ops::poll_chk(fds, n, timeout, fdslen));
}
FASTSOCK_HOOK int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  FASTSOCK_RETURN_DIRECT(int, ops::ppoll(fds, n, timeout, mask));
}
FASTSOCK_HOOK int __ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout,
                              const sigset_t* mask, size_t fdslen) {
  FASTSOCK_RETURN_DIRECT(int, ops::ppoll_chk(fds, n, timeout, mask, fdslen));
}
FASTSOCK_HOOK int select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  FASTSOCK_RETURN_DIRECT(int, ops::select(n, r, w, e, timeout));
}
FASTSOCK_HOOK int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
                          const sigset_t* mask) {
  FASTSOCK_RETURN_DIRECT(int, ops::pselect(n, r, w, e, timeout, mask));
}
FASTSOCK_HOOK int epoll_create(int size) noexcept { FASTSOCK_RETURN(int, ops::epoll_create(size)); }
FASTSOCK_HOOK int epoll_create1(int flags) noexcept {
  FASTSOCK_RETURN(int, ops::epoll_create1(flags));
}
FASTSOCK_HOOK int epoll_ctl(int epfd, int op, int fd, epoll_event* event) noexcept {
  FASTSOCK_RETURN_DIRECT(int, ops::epoll_ctl(epfd, op, fd, event));
}
FASTSOCK_HOOK int epoll_wait(int epfd, epoll_event* events, int max, int timeout) {
  FASTSOCK_RETURN_DIRECT(int, ops::epoll_wait(epfd, events, max, timeout));
}
FASTSOCK_HOOK int epoll_pwait(int epfd, epoll_event* events, int max, int timeout,
                              const sigset_t* mask) {
  FASTSOCK_RETURN_DIRECT(int, ops::epoll_pwait(epfd, events, max, timeout, mask));
}
FASTSOCK_HOOK int epoll_pwait2(int epfd, epoll_event* events, int max, const timespec* timeout,
                               const sigset_t* mask) {
  FASTSOCK_RETURN_DIRECT(int, ops::epoll_pwait2(epfd, events, max, timeout, mask));
}
