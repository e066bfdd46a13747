// A full-duplex connection with a reader thread and a writer thread on one end and an echo
// on the other: both threads of the first end sleep on the same connection at once, one
// for bytes and one for room. Every byte must come back intact and, under the library, with
// no stall: the shm link wakes a process's waiters through one eventfd per connection end,
// and a waiter that drains a wake-up meant for the other kind passes it on. Without that
// the reader slept with bytes in the ring until the echo's send gave up on the full ring
// after 250 ms (the stalled-ring rule) and moved to TCP, which the log then shows.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kChunk = 64 * 1024, kRounds = 4 };
static const size_t kTotal = 64u << 20;

static void* writer(void* arg) {
  const int fd = *(int*)arg;
  char* buf = malloc(kChunk);
  CHECK(buf != NULL, "malloc");
  for (size_t sent = 0; sent < kTotal; sent += kChunk) {
    fill_pattern(buf, kChunk, 7, sent);
    write_all(fd, buf, kChunk);
  }
  free(buf);
  return NULL;
}

static void* echo(void* arg) {
  const int fd = *(int*)arg;
  char* buf = malloc(kChunk);
  CHECK(buf != NULL, "malloc");
  for (;;) {
    ssize_t n = recv(fd, buf, kChunk, 0);
    CHECK(n >= 0, "echo recv");
    if (n == 0) break;
    write_all(fd, buf, (size_t)n);
  }
  free(buf);
  return NULL;
}

int main(void) {
  prog_init("duplex_threads");
  char* buf = malloc(kChunk);
  CHECK(buf != NULL, "malloc");
  for (int round = 0; round < kRounds; ++round) {
    int c, s;
    tcp_pair(AF_INET, &c, &s);
    expect_transport(c, both_ends_link());
    pthread_t w, e;
    CHECK(pthread_create(&e, NULL, echo, &s) == 0, "pthread_create");
    CHECK(pthread_create(&w, NULL, writer, &c) == 0, "pthread_create");
    size_t got = 0;
    while (got < kTotal) {
      size_t want = kTotal - got < kChunk ? kTotal - got : kChunk;
      ssize_t n = recv(c, buf, want, 0);
      CHECK(n > 0, "recv of the echo at %zu of %zu bytes", got, kTotal);
      check_pattern(buf, (size_t)n, 7, got, "the echoed bytes");
      got += (size_t)n;
    }
    CHECK(pthread_join(w, NULL) == 0, "pthread_join");
    SYS(shutdown(c, SHUT_WR));
    CHECK(pthread_join(e, NULL) == 0, "pthread_join");
    expect_no_log("fd=%d: the reader took nothing from the full ring", c);
    expect_no_log("fd=%d: the reader took nothing from the full ring", s);
    close(c);
    close(s);
  }
  free(buf);
  ok("%d rounds: %zu bytes each way through an echo, read and written by two threads", kRounds,
     kTotal);
  return 0;
}
