// Waiting costs no CPU, and never spins when the peer has gone quiet for good.
//
// 1. The peer half-closes (shutdown SHUT_WR) and stops reading while this end's send
//    buffer is full: poll() for POLLOUT must sleep until its timeout, not spin on the
//    peer's end of stream (the first version of the shm link spun here). On shm the first
//    wait may end after 250 ms with room on TCP (the stalled-ring rule); the next sleeps.
// 2. A blocked recv() on an idle connection sleeps.
// Each is checked with the CPU time the process used while waiting (getrusage): far less
// than the time waited. Under the library the connection is on shm (its spin budget is a
// few tens of microseconds per wait).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

static long cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 + ru.ru_stime.tv_sec * 1000 +
         ru.ru_stime.tv_usec / 1000;
}

static int g_idle_end;

static void* idle_reader(void* arg) {
  (void)arg;
  char b;
  CHECK(recv(g_idle_end, &b, 1, 0) == 1, "the idle reader's byte");
  return NULL;
}

// Non-blocking sends until EAGAIN.
static void fill_send_buffer(int fd) {
  static char buf[65536];
  size_t queued = 0;
  for (;;) {
    ssize_t n = send(fd, buf, sizeof buf, 0);
    if (n < 0) {
      CHECK(errno == EAGAIN, "send until full");
      return;
    }
    queued += (size_t)n;
    CHECK(queued < (64u << 20), "the send buffer never filled");
  }
}

int main(void) {
  prog_init("wait_cpu");
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_transport(c, both_ends_link());
  SYS(fcntl(c, F_SETFL, SYS(fcntl(c, F_GETFL)) | O_NONBLOCK));
  fill_send_buffer(c);
  SYS(shutdown(s, SHUT_WR));
  // On shm the ring holds less than TCP's buffers: a wait for room in a ring whose reader
  // takes nothing for 250 ms moves the direction to TCP and reports the room there (the
  // stalled-ring rule). Then that buffer fills too, and the next wait must sleep out.
  for (int round = 0;; ++round) {
    struct pollfd p = {c, POLLOUT, 0};
    const long before = cpu_ms();
    const int r = poll(&p, 1, 500);
    const long used = cpu_ms() - before;
    CHECK(used < 250, "poll slept up to 500 ms but used %ld ms of CPU", used);
    if (r == 0) {
      ok("POLLOUT wait on a full buffer after the peer's half-close: slept, %ld ms CPU in 500 ms",
         used);
      break;
    }
    CHECK(r == 1 && p.revents == POLLOUT && round == 0 && fastsock_present(),
          "poll for POLLOUT with a full buffer and a silent peer returned %d (revents %#x, "
          "round %d)", r, p.revents, round);
    expect_log("fd=%d: the reader took nothing from the ring for 250 ms while this end waited",
               c);
    fill_send_buffer(c);
  }

  int c2, s2;
  tcp_pair(AF_INET, &c2, &s2);
  g_idle_end = s2;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, idle_reader, NULL) == 0, "pthread_create");
  const long before = cpu_ms();
  sleep_ms(500);
  const long used = cpu_ms() - before;
  CHECK(used < 250, "a thread blocked in recv used %ld ms of CPU in 500 ms", used);
  write_all(c2, "x", 1);
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  ok("recv blocked on an idle connection: %ld ms CPU in 500 ms", used);
  close(c);
  close(s);
  close(c2);
  close(s2);
  return 0;
}
