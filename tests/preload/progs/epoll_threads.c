// Threads that each run an event loop on an epoll set of their own, as multi-threaded
// servers and load generators do (wrk, memcached, envoy), all at once over the link: each
// loop ping-pongs numbered messages between the two ends of its own connections, with
// epoll_ctl MOD/DEL/ADD between messages as such loops do. Meanwhile another thread closes
// epoll sets that a third thread is waiting on. Every message must arrive intact and in
// order, and no wait may hang or crash: under the library each set has its own lock, and a
// set closed during a wait lives until that wait ends (src/epoll_merge.cc, "Locks").
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common.h"

enum { kLoops = 3, kPairsPerLoop = 2, kMessages = 3000, kClosedWaits = 30 };

// Every descriptor is made before the threads start: a number the closer thread frees
// must not come back as one of theirs while its waiter still names it. That includes the
// library's own: it makes an eventfd for a set at the set's first epoll_ctl, and a new
// eventfd holds the lowest free number for a moment (src/internal_fds.hpp, take), so the
// loops' sets get their first connections in main.
struct loop {
  int index;
  int ep;
  int client[kPairsPerLoop], server[kPairsPerLoop];
};

// Waits for the one event of `fd` (tagged with it) on `ep`; the set holds no other ready
// descriptor at this point of the exchange.
static void wait_for(int ep, int fd, uint32_t want) {
  for (;;) {
    struct epoll_event ev[4];
    const int n = epoll_wait(ep, ev, 4, 5000);
    CHECK(n > 0, "epoll_wait gave %d within 5 s (errno %d) waiting for fd %d", n, errno, fd);
    for (int i = 0; i < n; ++i)
      if (ev[i].data.fd == fd && (ev[i].events & want)) return;
  }
}

static void* loop_main(void* arg) {
  struct loop* l = arg;
  const int ep = l->ep;
  for (uint32_t m = 0; m < kMessages; ++m) {
    const int p = (int)(m % kPairsPerLoop);
    const uint32_t msg[2] = {(uint32_t)l->index, m};
    uint32_t got[2];
    // Watched for room first, as a loop with bytes to send does, then for input again.
    struct epoll_event ev = {.events = EPOLLOUT, .data.fd = l->client[p]};
    SYS(epoll_ctl(ep, EPOLL_CTL_MOD, l->client[p], &ev));
    wait_for(ep, l->client[p], EPOLLOUT);
    ev.events = EPOLLIN;
    SYS(epoll_ctl(ep, EPOLL_CTL_MOD, l->client[p], &ev));
    write_all(l->client[p], msg, sizeof msg);
    wait_for(ep, l->server[p], EPOLLIN);
    read_exact(l->server[p], got, sizeof got);
    CHECK(got[0] == msg[0] && got[1] == msg[1], "loop %d message %u came as %u/%u", l->index,
          m, got[0], got[1]);
    // The answer, with the server end removed and added back (redis-benchmark's pattern).
    SYS(epoll_ctl(ep, EPOLL_CTL_DEL, l->server[p], NULL));
    write_all(l->server[p], msg, sizeof msg);
    wait_for(ep, l->client[p], EPOLLIN);
    read_exact(l->client[p], got, sizeof got);
    CHECK(got[0] == msg[0] && got[1] == msg[1], "loop %d answer %u came as %u/%u", l->index, m,
          got[0], got[1]);
    ev.events = EPOLLIN;
    ev.data.fd = l->server[p];
    SYS(epoll_ctl(ep, EPOLL_CTL_ADD, l->server[p], &ev));
  }
  return NULL;
}

struct closed_wait {
  int ep;
  int result, err;
};

static void* closed_wait_main(void* arg) {
  struct closed_wait* w = arg;
  struct epoll_event ev;
  w->result = epoll_wait(w->ep, &ev, 1, 100);
  w->err = errno;
  return NULL;
}

// epoll sets closed by one thread while another waits on them, over and over. The kernel
// lets such a wait run to its timeout (or fail with EBADF if it starts after the close);
// nothing of the closed set may be used after it is gone.
static void* closer_main(void* arg) {
  const int s = *(const int*)arg;
  for (int i = 0; i < kClosedWaits; ++i) {
    struct closed_wait w = {.ep = SYS(epoll_create1(EPOLL_CLOEXEC))};
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
    SYS(epoll_ctl(w.ep, EPOLL_CTL_ADD, s, &ev));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, closed_wait_main, &w) == 0, "pthread_create");
    sleep_ms(i % 3);  // before, during and after the waiter's spin
    close(w.ep);
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(w.result == 0 || (w.result < 0 && w.err == EBADF),
          "a wait on a set closed meanwhile gave %d (errno %d): nothing was sent", w.result,
          w.err);
  }
  return NULL;
}

int main(void) {
  prog_init("epoll_threads");
  struct loop loops[kLoops];
  for (int i = 0; i < kLoops; ++i) {
    loops[i].index = i;
    loops[i].ep = SYS(epoll_create1(EPOLL_CLOEXEC));
    for (int p = 0; p < kPairsPerLoop; ++p) {
      tcp_pair(AF_INET, &loops[i].client[p], &loops[i].server[p]);
      expect_transport(loops[i].client[p], both_ends_link());
      expect_transport(loops[i].server[p], both_ends_link());
      struct epoll_event ev = {.events = EPOLLIN, .data.fd = loops[i].server[p]};
      SYS(epoll_ctl(loops[i].ep, EPOLL_CTL_ADD, loops[i].server[p], &ev));
      ev.data.fd = loops[i].client[p];
      SYS(epoll_ctl(loops[i].ep, EPOLL_CTL_ADD, loops[i].client[p], &ev));
    }
  }
  int closer_pair[2];
  tcp_pair(AF_INET, &closer_pair[0], &closer_pair[1]);
  expect_transport(closer_pair[1], both_ends_link());
  pthread_t threads[kLoops], closer;
  for (int i = 0; i < kLoops; ++i)
    CHECK(pthread_create(&threads[i], NULL, loop_main, &loops[i]) == 0, "pthread_create");
  CHECK(pthread_create(&closer, NULL, closer_main, &closer_pair[1]) == 0, "pthread_create");
  for (int i = 0; i < kLoops; ++i) CHECK(pthread_join(threads[i], NULL) == 0, "pthread_join");
  CHECK(pthread_join(closer, NULL) == 0, "pthread_join");
  ok("%d event loops of their own each exchanged %d messages each way over %d connections, "
     "while %d epoll sets were closed under a waiting thread",
     kLoops, kMessages, kPairsPerLoop, kClosedWaits);
  for (int i = 0; i < kLoops; ++i) {
    close(loops[i].ep);
    for (int p = 0; p < kPairsPerLoop; ++p) {
      close(loops[i].client[p]);
      close(loops[i].server[p]);
    }
  }
  close(closer_pair[0]);
  close(closer_pair[1]);
  return 0;
}
