// A forked child that keeps waiting on an epoll set it inherited, after closing its copy of
// a connection registered there. The kernel shares the set between the two processes, and
// the parent still has the connection open, so the set's entries for it stay: on the plain
// kernel the child is told of the parent's connection's events, with the data the
// application registered. Under the library the set's entries for a connection on a link
// carry the library's tags, not the application's data: such an event must never reach the
// child as if it were the application's data (a pointer it would follow). Before, the child
// got the tag raw. Checked: every event the child gets carries the registered data, and the
// parent then gets its event and byte as usual. A second check: a set closed by one thread
// while another waits on it (started before the close) ends as a kernel wait does, however
// the number is handed out again meanwhile (the library's wait holds the set by a
// descriptor of its own).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum { kData = 0xC0FFEE };

static void inherited_set(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_transport(s, both_ends_link());
  const int ep = SYS(epoll_create1(EPOLL_CLOEXEC));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = kData};
  SYS(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
  int go[2], done[2];
  SYS(pipe(go));
  SYS(pipe(done));
  const pid_t child = SYS(fork());
  if (child == 0) {
    close(s);  // the parent keeps its copy: the set's entries stay
    char b;
    read_exact(go[0], &b, 1);
    int seen = 0, others = 0;
    for (int i = 0; i < 3; ++i) {
      struct epoll_event got[4];
      const int n = epoll_wait(ep, got, 4, 50);
      CHECK(n >= 0, "child: epoll_wait: errno %d", errno);
      for (int k = 0; k < n; ++k) {
        if (got[k].data.u64 == kData) ++seen;
        else ++others;
      }
    }
    CHECK(others == 0, "child: %d events with data the application never registered (%d with "
          "its own)", others, seen);
    write_all(done[1], "d", 1);
    _exit(0);
  }
  close(go[0]);
  close(done[1]);  // a child that fails ends the parent's read below
  write_all(c, "x", 1);
  write_all(go[1], "g", 1);
  char b;
  read_exact(done[0], &b, 1);
  wait_child_ok(child, "the child waiting on the inherited set");
  struct epoll_event got;
  CHECK(epoll_wait(ep, &got, 1, 5000) == 1, "parent: no event for its connection");
  CHECK(got.data.u64 == kData && (got.events & EPOLLIN), "parent: event %#x with data %#llx",
        got.events, (unsigned long long)got.data.u64);
  read_exact(s, &b, 1);
  CHECK(b == 'x', "parent: got %c", b);
  ok("a forked child waiting on its inherited set got no event with foreign data; the parent "
     "got its own");
  const int fds[] = {c, s, ep, go[1], done[0]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; ++i) close(fds[i]);
}

struct waiter {
  int ep;
  int result, err;
  uint64_t data;
};

static void* wait_main(void* arg) {
  struct waiter* w = arg;
  struct epoll_event ev;
  w->result = epoll_wait(w->ep, &ev, 1, 300);
  w->err = errno;
  w->data = ev.data.u64;
  return NULL;
}

// A set closed under a wait: its number is handed out at once to a readable eventfd, or to
// an epoll set with a ready entry, and then the connection registered in the closed set
// becomes readable. The kernel's wait holds on to the closed set and may report that
// connection, with the application's data; it never reports what took the number. The
// wait under the library may report the connection or nothing, and nothing else.
static void closed_under_wait(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  int result = 0, err = 0;
  for (int round = 0; round < 20; ++round) {
    struct waiter w = {.ep = SYS(epoll_create1(EPOLL_CLOEXEC))};
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = kData};
    SYS(epoll_ctl(w.ep, EPOLL_CTL_ADD, s, &ev));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_main, &w) == 0, "pthread_create");
    sleep_ms(30);  // the wait is on (spun out, asleep in the kernel)
    const int number = w.ep;
    close(w.ep);
    int taker, ready = -1;
    if (round % 2 == 0) {
      taker = SYS(eventfd(1, EFD_CLOEXEC));  // readable
    } else {
      taker = SYS(epoll_create1(EPOLL_CLOEXEC));
      ready = SYS(eventfd(1, EFD_CLOEXEC));
      struct epoll_event rev = {.events = EPOLLIN, .data.u64 = 1};
      SYS(epoll_ctl(taker, EPOLL_CTL_ADD, ready, &rev));
    }
    write_all(c, "y", 1);
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    char b;
    read_exact(s, &b, 1);
    if (w.result != 0 && !(w.result == 1 && w.data == kData)) {
      result = w.result;
      err = w.err;
      CHECK(0, "round %d: a wait on a set closed meanwhile gave %d (errno %d, data %#llx; its "
            "number went to %d)", round, result, err, (unsigned long long)w.data,
            taker == number ? 1 : 0);
    }
    close(taker);
    if (ready >= 0) close(ready);
  }
  ok("waits on sets closed under them reported nothing but the application's own data");
  close(c);
  close(s);
}

int main(void) {
  prog_init("fork_epoll");
  inherited_set();
  closed_under_wait();
  return 0;
}
