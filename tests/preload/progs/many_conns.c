// 1,000 concurrent connections between two processes, each verified, then all closed.
//
// A forked child opens CONNS connections to this process's listener and keeps them all
// open; each carries a request naming its index and gets a reply naming it back, checked on
// both ends. Under the library every connection is on the shm link: both processes log one
// connection line per connection, and this process maps one segment per connection while
// all are open. Then the child closes every connection; this end sees end of stream on each
// and closes too. Afterwards both processes are back to the descriptors and mappings they
// had before (leaks of memfds, eventfds or mappings would show there).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { CONNS = 1000, MSG = 24 };

static int g_fd[CONNS];

static void message(char* m, const char* kind, int i) { snprintf(m, MSG, "%s %09d", kind, i); }

static void check_message(int fd, const char* kind, int i) {
  char got[MSG], want[MSG];
  read_exact(fd, got, MSG);
  message(want, kind, i);
  CHECK(memcmp(got, want, MSG) == 0, "connection %d: got '%.*s', want '%s'", i, MSG, got, want);
}

// Every process starts from its own baseline: the one-time descriptors of the library
// (stats, probe socket) exist once a first connection was made, so that comes first. The
// rendezvous channels are counted apart: how many stay open depends on how many handshakes
// overlapped (one channel each), bounded by the library, not on the open connections.
// The warm-up connection's pooled segment is idle at the baseline and counted apart (the
// connections below reuse it).
static void warm_up_baseline(int* fds, int* maps) {
  *fds = count_unpooled_fds();
  *maps = unpooled_segment_mappings();
}

// A connector keeps at most 32 idle channels per destination (kMaxIdlePerDestination); a
// listener at most its table's 128 (Listener::Options::table_capacity), plus the record
// itself (a listening SOCK_SEQPACKET socket).
static void check_channels(const char* who, int bound) {
  const int channels = count_rendezvous_channels();
  CHECK(channels <= bound, "%s: %d rendezvous channels open, bound %d", who, channels, bound);
  ok("%s: %d rendezvous channels open (bound %d)", who, channels, bound);
}

// Descriptors per open connection: the socket, and under the library the two eventfds of
// the shm link (this end's and the peer's), plus, for some, the segment's memfd, kept
// while descriptors are plentiful so that the connection could continue over exec
// (counted apart: at most one per connection).
static int all_memfds(void) { return count_memfds(0) + count_memfds(1); }

// Taken with the warm-up baseline: descriptors that are neither a memfd nor an idle pooled
// slot's eventfd (a connection that reuses the warm-up slot counts its two eventfds), and
// the memfds.
struct fd_base {
  int other, memfds;
};
static struct fd_base fd_base_now(void) {
  return (struct fd_base){count_connection_fds() - 2 * pooled_segment_mappings() - all_memfds(),
                          all_memfds()};
}

static void check_fds_per_connection(const char* who, struct fd_base base) {
  const int want = fastsock_present() ? 3 : 1;
  const int memfds = all_memfds() - base.memfds;
  const int extra = count_connection_fds() - all_memfds() - base.other;
  const int per = extra / CONNS, rest = extra % CONNS;
  CHECK(per == want && rest == 0, "%s: %d descriptors for %d connections, want %d each", who,
        extra, CONNS, want);
  CHECK(memfds >= 0 && memfds <= CONNS, "%s: %d memfds kept for %d connections", who, memfds,
        CONNS);
  ok("%s: %d descriptors per open connection, and %d memfds kept for exec", who, per, memfds);
}

// The channels' pools keep up to 16 segments each (and their eventfds): counted apart.
static void back_to_baseline(const char* who, int fds, int maps) {
  CHECK(count_unpooled_fds() == fds, "%s: %d descriptors after closing everything, %d before", who,
        count_unpooled_fds(), fds);
  CHECK(unpooled_segment_mappings() == maps, "%s: %d shm mappings after closing, %d before", who,
        unpooled_segment_mappings(), maps);
  check_pool_bound(who);
  ok("%s: back to %d descriptors and %d shm mappings, %d pooled segments", who, fds, maps,
     pooled_segment_mappings());
}

static _Noreturn void client(uint16_t port) {
  // The warm-up connection (one byte each way: on shm like the others) is closed before
  // the baseline is taken.
  int warm = tcp_connect(AF_INET, port);
  char b = 'w';
  write_all(warm, &b, 1);
  read_exact(warm, &b, 1);
  SYS(close(warm));
  int fds, maps;
  warm_up_baseline(&fds, &maps);
  const struct fd_base base = fd_base_now();
  char m[MSG];
  for (int i = 0; i < CONNS; i++) {
    g_fd[i] = tcp_connect(AF_INET, port);
    message(m, "request", i);
    write_all(g_fd[i], m, MSG);
  }
  expect_transport(g_fd[0], both_ends_link());
  expect_transport(g_fd[CONNS - 1], both_ends_link());
  for (int i = 0; i < CONNS; i++) check_message(g_fd[i], "reply", i);
  check_fds_per_connection("client", base);
  ok("client: %d connections open at once, each request answered", CONNS);
  expect_count(CONNS + 1, "fd=|client |on %s", both_ends_link());
  for (int i = 0; i < CONNS; i++) SYS(close(g_fd[i]));
  back_to_baseline("client", fds, maps);
  check_channels("client", 32);
  exit(0);
}

int main(void) {
  prog_init("many_conns");
  // Per connection and process: the socket, and under the library two eventfds and, for a
  // moment, the segment's memfd.
  const long limit = raise_nofile(6 * CONNS + 64);
  CHECK(limit >= 5 * CONNS, "RLIMIT_NOFILE is %ld: too low for %d connections", limit, CONNS);
  int lfd = tcp_listen(AF_INET, 0, CONNS);
  const uint16_t port = local_port(lfd);
  hang_guard(60, "1,000 connections");
  const int pid = (int)SYS(fork());
  if (pid == 0) {
    SYS(close(lfd));
    client(port);
  }
  int warm = (int)SYS(accept(lfd, NULL, NULL));  // the child's warm-up connection
  char b;
  read_exact(warm, &b, 1);
  write_all(warm, &b, 1);
  SYS(close(warm));
  int fds, maps;
  warm_up_baseline(&fds, &maps);
  const struct fd_base base = fd_base_now();
  for (int i = 0; i < CONNS; i++) g_fd[i] = (int)SYS(accept(lfd, NULL, NULL));
  expect_transport(g_fd[0], both_ends_link());
  expect_transport(g_fd[CONNS - 1], both_ends_link());
  if (fastsock_present()) {
    const int open_maps = shm_segment_mappings() - maps;
    CHECK(open_maps == CONNS, "%d shm segments mapped with %d connections open", open_maps,
          CONNS);
    ok("server: %d shm segments mapped, one per connection", open_maps);
  }
  // Each request names its connection's index in the child; each is answered with it.
  static char seen[CONNS];
  char m[MSG];
  for (int i = 0; i < CONNS; i++) {
    char got[MSG + 1] = {0};
    read_exact(g_fd[i], got, MSG);
    int index = -1;
    CHECK(sscanf(got, "request %9d", &index) == 1 && index >= 0 && index < CONNS &&
              !seen[index], "connection %d: request '%s'", i, got);
    seen[index] = 1;
    message(m, "reply", index);
    write_all(g_fd[i], m, MSG);
  }
  ok("server: %d requests checked and answered", CONNS);
  check_fds_per_connection("server", base);
  for (int i = 0; i < CONNS; i++) {
    char b;
    ssize_t n = read(g_fd[i], &b, 1);
    CHECK(n == 0, "connection %d: read after the client's close returned %zd", i, n);
    SYS(close(g_fd[i]));
  }
  ok("server: end of stream on all %d connections", CONNS);
  expect_count(CONNS + 1, "fd=|server |on %s", both_ends_link());
  wait_child_ok(pid, "the client");
  back_to_baseline("server", fds, maps);  // the listener (and its rendezvous record) still open
  check_channels("server", 128 + 1);
  SYS(close(lfd));
  return 0;
}
