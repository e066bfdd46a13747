// Both ends write a whole message before they read the other's: kernel TCP takes each
// message into its socket buffers (megabytes on loopback), so both writes complete. A link
// with smaller buffers must not deadlock here: the shm link moves a direction whose reader
// takes nothing from the full ring for a while to TCP (shm/shm_conn.cc, kStalledRingNs);
// the verbs link (rdma suite) gives the link up when the peer returns no credit for a
// while (verbs_conn.cc, kStalledLinkNs).
//
// Size: 2 MiB, above the shm ring's largest window as the test runs it (meson sets
// FASTSOCK_SHM_RING_MAX=1M; a ring grows to it at once for a write larger than its window)
// and within what TCP's loopback buffers take (3 MiB each way passed here). One thread per
// end. Without the stalled-ring rule this deadlocks under the library (checked: killed by
// the timeout). The argument says how each end waits:
//   (none)  blocking sockets: the wait is inside send (shm_conn.cc, Conn::send);
//   poll    non-blocking sockets, poll() for POLLOUT/POLLIN after EAGAIN (an event loop:
//           the stall is seen by the poll, Conn::poll_now, which wakes for it in time
//           through Transport::recheck_at);
//   epoll   the same with an epoll set per end (edge-triggered, so only a wake-up the
//           library produces itself reports the room).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kMessage = 2048 * 1024 };

enum wait_mode { kBlocking, kPoll, kEpoll };
static enum wait_mode g_mode = kBlocking;

struct end {
  int fd;
  unsigned send_seed, recv_seed;
  int epfd;  // kEpoll: this end's set, the socket in it for EPOLLIN | EPOLLOUT, edge-triggered
};

// Until `events` is reported for the end's socket.
static void wait_for(struct end* e, short events) {
  if (g_mode == kPoll) {
    struct pollfd p = {e->fd, events, 0};
    CHECK(poll(&p, 1, -1) == 1, "poll");
    return;
  }
  for (;;) {
    struct epoll_event ev;
    const int n = epoll_wait(e->epfd, &ev, 1, -1);
    CHECK(n == 1 || (n < 0 && errno == EINTR), "epoll_wait");
    if (n == 1 && (ev.events & ((uint32_t)events | EPOLLERR | EPOLLHUP))) return;
  }
}

// write_all/read_exact on a non-blocking socket: the rest after each EAGAIN.
static void move_all(struct end* e, char* buf, size_t len, int sending) {
  for (size_t done = 0; done < len;) {
    const ssize_t n = sending ? write(e->fd, buf + done, len - done)
                              : read(e->fd, buf + done, len - done);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    CHECK(n != 0, "EOF after %zu of %zu bytes", done, len);
    CHECK(errno == EAGAIN || errno == EINTR, "%s: %s", sending ? "write" : "read", strerror(errno));
    if (errno == EAGAIN) wait_for(e, sending ? POLLOUT : POLLIN);
  }
}

static void* exchange(void* arg) {
  struct end* e = arg;
  char* out = malloc(kMessage);
  char* in = malloc(kMessage);
  CHECK(out && in, "malloc");
  fill_pattern(out, kMessage, e->send_seed, 0);
  if (g_mode == kBlocking) {
    write_all(e->fd, out, kMessage);
    read_exact(e->fd, in, kMessage);
  } else {
    move_all(e, out, kMessage, 1);
    move_all(e, in, kMessage, 0);
  }
  check_pattern(in, kMessage, e->recv_seed, 0, "the peer's message");
  free(out);
  free(in);
  return NULL;
}

static void make_nonblocking(struct end* e) {
  CHECK(fcntl(e->fd, F_SETFL, fcntl(e->fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
  if (g_mode != kEpoll) return;
  e->epfd = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.fd = e->fd};
  CHECK(e->epfd >= 0 && epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->fd, &ev) == 0, "epoll");
}

int main(int argc, char** argv) {
  prog_init("write_before_read");
  if (argc > 1) {
    CHECK(strcmp(argv[1], "poll") == 0 || strcmp(argv[1], "epoll") == 0,
          "usage: write_before_read [poll|epoll]");
    g_mode = strcmp(argv[1], "poll") == 0 ? kPoll : kEpoll;
  }
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_transport(c, both_ends_link());
  // The verbs link comes up after the TCP connect; until then both ends write to TCP,
  // whose buffers would take the whole message without testing the link.
  if (strcmp(both_ends_link(), "verbs") == 0) {
    wait_for_log(10, "fd=%d verbs: RDMA connection established", c);
    wait_for_log(10, "fd=%d verbs: RDMA connection established", s);
  }
  struct end client = {c, 1, 2, -1}, server = {s, 2, 1, -1};
  if (g_mode != kBlocking) {
    make_nonblocking(&client);
    make_nonblocking(&server);
  }
  pthread_t t;
  CHECK(pthread_create(&t, NULL, exchange, &server) == 0, "pthread_create");
  exchange(&client);
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  // The rule that got them out (either end's direction, or both, may have moved).
  if (g_mode != kBlocking && strcmp(both_ends_link(), "shm") == 0)
    expect_log("fd=|while this end waited for room in poll/epoll: this direction continues on TCP");
  if (strcmp(both_ends_link(), "verbs") == 0)
    expect_log("fd=|verbs: the peer consumed nothing for 1 s while this end waited for room");
  ok("both ends wrote %d bytes before reading (%s), both got the other's intact", kMessage,
     argc > 1 ? argv[1] : "blocking");
  close(c);
  close(s);
  return 0;
}
