// Both ends write a whole message before they read the other's: kernel TCP takes each
// message into its socket buffers (megabytes on loopback), so both writes complete. A link
// with smaller buffers must not deadlock here: the shm link moves a direction whose reader
// takes nothing from the full ring for a while to TCP (shm/shm_conn.cc, kStalledRingNs).
//
// Size: 2 MiB, above the shm ring's largest window as the test runs it (meson sets
// FASTSOCK_SHM_RING_MAX=1M; a ring grows to it at once for a write larger than its window)
// and within what TCP's loopback buffers take (3 MiB each way passed here). Blocking sockets, one thread per end. Without the stalled-ring rule this
// deadlocks under the library (checked: killed by the timeout).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kMessage = 2048 * 1024 };

struct end {
  int fd;
  unsigned send_seed, recv_seed;
};

static void* exchange(void* arg) {
  struct end* e = arg;
  char* out = malloc(kMessage);
  char* in = malloc(kMessage);
  CHECK(out && in, "malloc");
  fill_pattern(out, kMessage, e->send_seed, 0);
  write_all(e->fd, out, kMessage);
  read_exact(e->fd, in, kMessage);
  check_pattern(in, kMessage, e->recv_seed, 0, "the peer's message");
  free(out);
  free(in);
  return NULL;
}

int main(void) {
  prog_init("write_before_read");
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_transport(c, both_ends_link());
  struct end client = {c, 1, 2}, server = {s, 2, 1};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, exchange, &server) == 0, "pthread_create");
  exchange(&client);
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  ok("both ends wrote %d bytes before reading, both got the other's intact", kMessage);
  close(c);
  close(s);
  return 0;
}
