// SO_RCVTIMEO and SO_SNDTIMEO on blocking sockets: the call blocks for about the timeout,
// then fails with EAGAIN; the option reads back; data that arrives in time is returned.
// Only a lower bound on the time waited is checked (half the timeout: the kernel never
// returns early), which shows the call blocked rather than failing at once; there is no
// upper bound (loaded machines are slow).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { kTimeoutMs = 200 };

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void set_timeout(int fd, int opt) {
  struct timeval tv = {0, kTimeoutMs * 1000};
  SYS(setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv));
  struct timeval back = {0, 0};
  socklen_t len = sizeof back;
  SYS(getsockopt(fd, SOL_SOCKET, opt, &back, &len));
  CHECK(back.tv_sec == 0 && back.tv_usec >= kTimeoutMs * 1000 - 4000 &&
            back.tv_usec <= kTimeoutMs * 1000 + 4000,
        "timeout reads back as %ld.%06ld s", (long)back.tv_sec, (long)back.tv_usec);
}

int main(void) {
  prog_init("timeouts");
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);

  // SO_RCVTIMEO: nothing to read -> EAGAIN after the timeout, for recv and read.
  set_timeout(s, SO_RCVTIMEO);
  char buf[64];
  long t0 = now_ms();
  ssize_t n = recv(s, buf, sizeof buf, 0);
  long waited = now_ms() - t0;
  CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK), "recv returned %zd", n);
  CHECK(waited >= kTimeoutMs / 2, "recv gave up after %ld ms, timeout %d ms", waited,
        kTimeoutMs);
  t0 = now_ms();
  n = read(s, buf, sizeof buf);
  waited = now_ms() - t0;
  CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK), "read returned %zd", n);
  CHECK(waited >= kTimeoutMs / 2, "read gave up after %ld ms", waited);
  ok("SO_RCVTIMEO %d ms: recv and read fail with EAGAIN after blocking (%ld ms)", kTimeoutMs,
     waited);
  write_all(c, "ping", 4);
  n = recv(s, buf, sizeof buf, MSG_WAITALL);  // fewer than asked: the timeout ends the wait
  CHECK(n == 4 && !memcmp(buf, "ping", 4), "recv with data queued returned %zd", n);
  ok("SO_RCVTIMEO: queued data is returned (MSG_WAITALL stops at the timeout with 4 bytes)");

  // SO_SNDTIMEO: the peer never reads; once the buffers are full, send blocks for the
  // timeout and fails with EAGAIN (a send that moved some bytes returns that count).
  int small = 16 * 1024;
  SYS(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof small));
  SYS(setsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small));
  set_timeout(c, SO_SNDTIMEO);
  static char big[256 * 1024];
  size_t sent = 4;
  int eagain = 0;
  for (int i = 0; i < 200 && !eagain; i++) {
    fill_pattern(big, sizeof big, 4, sent - 4);
    t0 = now_ms();
    n = send(c, big, sizeof big, 0);
    waited = now_ms() - t0;
    if (n == -1) {
      CHECK(errno == EAGAIN || errno == EWOULDBLOCK, "send failed with errno %d", errno);
      CHECK(waited >= kTimeoutMs / 2, "send gave up after %ld ms", waited);
      eagain = 1;
    } else {
      CHECK(n > 0 && n <= (ssize_t)sizeof big, "send returned %zd", n);
      sent += (size_t)n;
    }
  }
  CHECK(eagain, "send never hit SO_SNDTIMEO after %zu bytes", sent);
  ok("SO_SNDTIMEO %d ms: send fails with EAGAIN after blocking (%ld ms), %zu bytes queued",
     kTimeoutMs, waited, sent - 4);

  // Drain: every byte that send reported arrives, in order, then EOF.
  SYS(shutdown(c, SHUT_WR));
  size_t got = 0;
  for (;;) {
    n = recv(s, big, sizeof big, 0);
    if (n == -1 && errno == EAGAIN) continue;  // SO_RCVTIMEO is still set
    CHECK(n >= 0, "drain recv");
    if (n == 0) break;
    check_pattern(big, (size_t)n, 4, got, "data sent before the timeout");
    got += (size_t)n;
  }
  CHECK(got == sent - 4, "peer received %zu bytes, send reported %zu", got, sent - 4);
  ok("peer received exactly the %zu bytes send reported", got);
  expect_closed_log(c, sent, 0);
  expect_closed_log(s, 0, got + 4);
  SYS(close(c));
  SYS(close(s));
  return 0;
}
