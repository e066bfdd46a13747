// epoll over sets that hold connections whose link carries data outside the kernel (shm,
// verbs). The kernel cannot see such a link's readiness, so for each of these connections
// the set holds, in the kernel, the connection's socket (for its hang-up and errors) and the
// link's wake descriptors, all tagged with a Registration of ours; epoll_wait turns their
// wake-ups into the application's events by asking the link (Transport::poll_now), with the
// kernel's semantics: level-triggered (kept on a ready list and re-checked at every wait, so
// the cost grows with ready connections, not watched ones), EPOLLET, EPOLLONESHOT,
// EPOLLRDHUP, EPOLLEXCLUSIVE. A set that has such a ready connection keeps an eventfd of its
// own readable, so the epoll fd itself polls readable inside poll() or another epoll set.
// Sets without such connections go to the kernel untouched.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/epoll.h>
#include <time.h>

namespace fastsock {

struct Socket;

namespace epoll_merge {

// epoll_ctl. Returns true when this module handled the call (a user-link connection, or a
// registration it holds), with the result (0 or -errno) in *rc; false: the kernel's call.
bool ctl(int epfd, int op, int fd, epoll_event* event, long* rc);

// epoll_wait/epoll_pwait/epoll_pwait2 (`timeout` null: forever). Returns false when the set
// holds no user-link connection (the caller asks the kernel directly).
bool wait(int epfd, epoll_event* out, int max, const timespec* timeout, const sigset_t* mask,
          long* rc);

// The kernel re-checks an epoll set's level-triggered items whenever the set's descriptor is
// polled (by poll(), select() or an outer epoll set), so a connection read dry since the
// set's last wait no longer makes the set readable. Our sets say "readable" through their
// bell, which only a wait on the set itself brings up to date; so before a wait that
// watches a set's descriptor from outside, its ready list is re-checked: the sets among a
// poll's or select's descriptors (and the sets of ours registered in those), and the sets
// of ours registered in an epoll set about to be waited on. One relaxed load when no bell
// is rung (or no set of ours is registered in another set).
void refresh_polled(const pollfd* fds, nfds_t n) noexcept;
void refresh_selected(int n, const fd_set* readable) noexcept;
void refresh_nested(int epfd) noexcept;

// The connection's link now wakes its waiters through other descriptors (Transport::
// wait_fds changed: shm's late attach): its registrations watch them from here on, and it
// is looked at again at the next wait. Not with a set's lock held (not from poll_now).
void rewatch(Socket& s) noexcept;

// The connection is going away (its last descriptor closed): drop its registrations.
void forget_socket(Socket& s) noexcept;

// Descriptors in [first, last] are closing: epoll sets among them lose their registrations.
void forget_sets(unsigned first, unsigned last) noexcept;

}  // namespace epoll_merge
}  // namespace fastsock
