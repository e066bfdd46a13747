// Connect/close churn: CYCLES connect, request, reply, close cycles between two processes,
// with bounded memory.
//
// A forked child accepts and echoes one request per connection; this process connects,
// sends 64 bytes, checks the echo and closes, CYCLES times (under the library every
// connection is on the shm link: each takes a segment and eventfds, which the rendezvous
// channel's pool keeps for the next connection). Both processes measure themselves after
// WARM_UP cycles (allocator pools, the library's tables and the stats file exist by then)
// and at the end: the number of shm mappings, pooled segments (bounded) apart, must be
// exactly what it was after the warm-up, the descriptor count may change only with the
// number of pooled segments (up to three each: a second segment may join the pool after the
// warm-up when two connections overlap, CI 2026-12-03), and the resident set may grow
// by at most RSS_BOUND_KIB. The bound is loose on purpose (malloc arenas and page-cache
// noise); a leak of one segment page per cycle would already exceed it (4 KiB × 4,500 =
// 17.6 MiB), and a leaked mapping or descriptor is caught exactly.
//
// With the argument `one-cpu`, both processes run on one CPU: there the acceptor usually
// runs inside the connector's connect() (the SYN wakes it) and matches the connection by
// its socket's cookie, before the connector could send its local endpoint
// (docs/shm-rendezvous.md).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { CYCLES = 5000, WARM_UP = 500, MSG = 64, RSS_BOUND_KIB = 8192 };

struct usage {
  int fds, pooled, maps;
  long rss;
};

// The channel's pool keeps the segments of finished connections (one or two here, up to 16,
// depending on how the two processes' closes interleave), each with up to three
// descriptors (its memfd and the two ends' eventfds): bounded, and the only descriptors
// allowed to come or go.
static struct usage measure(void) {
  check_pool_bound("churn");
  struct usage u = {count_fds(), pooled_segment_mappings(), unpooled_segment_mappings(),
                    rss_kib()};
  return u;
}

static void check_bounded(const char* who, struct usage warm) {
  struct usage end = measure();
  const int pooled = end.pooled - warm.pooled, fds = end.fds - warm.fds;
  CHECK(abs(fds) <= 3 * abs(pooled) && (pooled != 0 || fds == 0) && (long)fds * pooled >= 0,
        "%s: %d descriptors after %d cycles, %d after the warm-up, with %+d pooled segments",
        who, end.fds, CYCLES, warm.fds, pooled);
  CHECK(end.maps == warm.maps, "%s: %d shm mappings after %d cycles, %d after the warm-up",
        who, end.maps, CYCLES, warm.maps);
  CHECK(end.rss - warm.rss <= RSS_BOUND_KIB, "%s: RSS grew by %ld KiB from cycle %d to %d "
        "(bound %d KiB)", who, end.rss - warm.rss, WARM_UP, CYCLES, RSS_BOUND_KIB);
  ok("%s: %d cycles; after the warm-up %d fds, %d shm mappings, RSS %ld KiB; at the end %+d "
     "fds with %+d pooled segments, the same mappings, RSS %+ld KiB (bound %d KiB)", who, CYCLES,
     warm.fds, warm.maps, warm.rss, fds, pooled, end.rss - warm.rss, RSS_BOUND_KIB);
}

static _Noreturn void echo_server(int lfd) {
  struct usage warm = {0, 0, 0, 0};
  char buf[MSG];
  for (int i = 0; i < CYCLES; i++) {
    if (i == WARM_UP) warm = measure();
    int fd = (int)SYS(accept(lfd, NULL, NULL));
    read_exact(fd, buf, MSG);
    write_all(fd, buf, MSG);
    CHECK(read(fd, buf, 1) == 0, "cycle %d: no end of stream after the echo", i);
    SYS(close(fd));
  }
  check_bounded("server", warm);
  exit(0);
}

int main(int argc, char** argv) {
  prog_init("conn_churn");
  hang_guard(100, "connect/close churn");
  if (argc > 1 && strcmp(argv[1], "one-cpu") == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    SYS(sched_setaffinity(0, sizeof one, &one));  // inherited by the forked server
    ok("both processes on CPU %d", sched_getcpu());
  }
  int lfd = tcp_listen(AF_INET, 0, 64);
  const uint16_t port = local_port(lfd);
  const int pid = (int)SYS(fork());
  if (pid == 0) echo_server(lfd);
  SYS(close(lfd));
  struct usage warm = {0, 0, 0, 0};
  char out[MSG], in[MSG];
  for (int i = 0; i < CYCLES; i++) {
    if (i == WARM_UP) warm = measure();
    int fd = tcp_connect(AF_INET, port);
    if (i == 0 || i == CYCLES - 1) expect_transport(fd, both_ends_link());
    fill_pattern(out, MSG, (unsigned)i, 0);
    write_all(fd, out, MSG);
    read_exact(fd, in, MSG);
    check_pattern(in, MSG, (unsigned)i, 0, "the echo");
    SYS(close(fd));
  }
  expect_count(CYCLES, "fd=|client |on %s", both_ends_link());
  check_bounded("client", warm);
  wait_child_ok(pid, "the echo server");
  return 0;
}
