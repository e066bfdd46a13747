// An application that closes every descriptor it does not know about (a daemon's clean-up
// loop, close_range, closefrom), while it has a connection in an epoll set. The library's
// own descriptors (eventfds that wake a connection's waiters and an emulated epoll set, the
// rendezvous sockets) were never given to the application, so those closes must not reach
// them: afterwards the connection still wakes its epoll_wait and a blocked read, and stays
// on its link. Under the plain kernel the same program checks the POSIX side (EBADF for
// numbers that are not open, close_range/closefrom succeed).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <unistd.h>

#include "common.h"

struct delayed_write {
  int fd;
  char byte;
};

static void* write_later(void* arg) {
  const struct delayed_write* d = arg;
  sleep_ms(100);
  write_all(d->fd, &d->byte, 1);
  return NULL;
}

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

int main(void) {
  prog_init("close_all");
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_transport(c, both_ends_link());
  const int ep = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
  SYS(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
  // One round trip through the epoll set first, so that every internal descriptor exists.
  struct delayed_write first = {c, 'a'};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, write_later, &first) == 0, "pthread_create");
  struct epoll_event got;
  CHECK(epoll_wait(ep, &got, 1, 5000) == 1 && got.data.fd == s, "epoll_wait before");
  char byte = 0;
  read_exact(s, &byte, 1);
  pthread_join(t, NULL);

  const int highest = max3(c, s, ep);
  int refused = 0;
  for (int fd = 3; fd <= highest + 64; ++fd) {
    if (fd == c || fd == s || fd == ep) continue;
    if (close(fd) != 0) {
      CHECK(errno == EBADF, "close(%d) failed with errno %d, not EBADF", fd, errno);
      ++refused;
    }
  }
  ok("closed every other descriptor up to %d (%d were not open)", highest + 64, refused);
  CHECK(close_range((unsigned)highest + 1, ~0u, 0) == 0, "close_range (libc)");
  closefrom(highest + 1);
  ok("close_range and closefrom above %d", highest);

  struct delayed_write to_server = {c, 'b'};
  CHECK(pthread_create(&t, NULL, write_later, &to_server) == 0, "pthread_create");
  const int n = epoll_wait(ep, &got, 1, 5000);
  CHECK(n == 1 && got.data.fd == s, "epoll_wait after the closes: %d", n);
  read_exact(s, &byte, 1);
  CHECK(byte == 'b', "byte %c", byte);
  pthread_join(t, NULL);
  ok("the epoll set still reports the connection");

  struct timeval limit = {5, 0};
  SYS(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit));
  struct delayed_write to_client = {s, 'c'};
  CHECK(pthread_create(&t, NULL, write_later, &to_client) == 0, "pthread_create");
  read_exact(c, &byte, 1);
  CHECK(byte == 'c', "byte %c", byte);
  pthread_join(t, NULL);
  ok("a blocked read still wakes");
  expect_transport(c, both_ends_link());
  expect_transport(s, both_ends_link());
  SYS(close(ep));
  SYS(close(c));
  SYS(close(s));
  return 0;
}
