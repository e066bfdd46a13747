// kill -9 of either end of a connection: the survivor sees the death promptly and intact.
//
// The peer is a forked child (under the library too when it is preloaded: LD_PRELOAD is
// inherited), once as the connector and once as the acceptor. Both ends check that the
// connection is on the shared-memory link before the fault. Then the survivor kills the
// child with SIGKILL while
//   - the child streams a byte pattern to it (ring writes and handoffs of 300 KiB),
//   - the survivor streams to the child,
//   - the survivor is blocked in send (the child never reads: the ring is full),
//   - the survivor is blocked in recv (the child sent a little, then went quiet).
// The survivor must get end of stream or ECONNRESET (EPIPE or ECONNRESET on send), within
// the hang guard, never a crash; every byte it received must be the pattern, in order. After
// each death the survivor's descriptors and shm mappings are back to what they were, and at
// the end a fresh connection carries 1 MiB both ways correctly.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum role { CHILD_CONNECTS, CHILD_ACCEPTS };
enum situation { CHILD_SENDS, CHILD_READS, BLOCKED_SEND, BLOCKED_RECV, ECHO };

static const char* const role_names[] = {"child connects", "child accepts"};
static const char* const situation_names[] = {
    "kill during the child's bulk send", "kill during the survivor's bulk send",
    "kill while the survivor is blocked in send", "kill while the survivor is blocked in recv",
    "clean echo"};

enum { BULK_SEED = 7, KILL_AFTER = 8 << 20, QUIET_BYTES = 100, ECHO_BYTES = 1 << 20 };
static const size_t chunk_sizes[] = {1024, 65536, 300 * 1024, 4096};
static char g_buf[1 << 20];

// The child's half: never returns.
static _Noreturn void child_body(int fd, enum situation s) {
  size_t off = 0;
  switch (s) {
    case CHILD_SENDS:
      for (unsigned i = 0;; i++) {
        size_t len = chunk_sizes[i % 4];
        fill_pattern(g_buf, len, BULK_SEED, off);
        write_all(fd, g_buf, len);
        off += len;
      }
    case CHILD_READS:
      for (;;) {
        ssize_t n = read(fd, g_buf, sizeof g_buf);
        CHECK(n > 0, "the child's read returned %zd", n);
      }
    case BLOCKED_SEND:
      for (;;) pause();  // never reads
    case BLOCKED_RECV:
      fill_pattern(g_buf, QUIET_BYTES, BULK_SEED, 0);
      write_all(fd, g_buf, QUIET_BYTES);
      for (;;) pause();
    case ECHO:
      read_exact(fd, g_buf, ECHO_BYTES);
      write_all(fd, g_buf, ECHO_BYTES);
      CHECK(read(fd, g_buf, 1) == 0, "EOF after the echo");
      exit(0);
  }
  _exit(2);
}

static int connect_child(enum role r, enum situation s, pid_t* child) {
  int fd = fork_connected(r == CHILD_ACCEPTS, child);
  if (*child == 0) child_body(fd, s);
  return fd;
}

static atomic_size_t g_progress;   // bytes the survivor moved so far
static atomic_int g_blocking;      // the survivor is about to enter its blocking call
struct killer {
  pid_t child;
  enum situation s;
};

// Kills the child with SIGKILL once the survivor is in the middle of the transfer, or
// 300 ms after it said it was about to block.
static void* killer_main(void* arg) {
  struct killer* k = arg;
  if (k->s == CHILD_SENDS || k->s == CHILD_READS) {
    while (atomic_load(&g_progress) < KILL_AFTER) sleep_ms(1);
  } else {
    while (!atomic_load(&g_blocking)) sleep_ms(1);
    sleep_ms(300);
  }
  SYS(kill(k->child, SIGKILL));
  return NULL;
}

static void expect_killed(pid_t child, const char* what) {
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child, "waitpid for %s", what);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
        "%s: the child ended with status %#x, not by our SIGKILL", what, status);
  remove_killed_child_stats(child);
}

// Receives until the stream ends, checking the pattern; returns the final recv's result
// (0, or -errno).
static long receive_until_death(int fd) {
  size_t off = 0;
  for (;;) {
    ssize_t n = recv(fd, g_buf, sizeof g_buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : 0;
    check_pattern(g_buf, (size_t)n, BULK_SEED, off, "bytes received before the peer's death");
    off += (size_t)n;
    atomic_store(&g_progress, off);
  }
}

// Sends until send fails; returns -errno (a send to a dead peer must fail).
static long send_until_death(int fd, size_t limit) {
  size_t off = 0;
  for (unsigned i = 0;; i++) {
    size_t len = chunk_sizes[i % 4];
    ssize_t n = send(fd, g_buf, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    CHECK(n > 0, "send returned 0");
    off += (size_t)n;
    atomic_store(&g_progress, off);
    CHECK(off < limit, "still sending after %zu bytes: the peer's death went unnoticed", off);
  }
}

static void run_case(enum role r, enum situation s) {
  char what[160];
  snprintf(what, sizeof what, "%s, %s", role_names[r], situation_names[s]);
  const int fds_before = count_unpooled_fds();
  const int maps_before = unpooled_segment_mappings();
  pid_t child;
  int fd = connect_child(r, s, &child);
  atomic_store(&g_progress, 0);
  atomic_store(&g_blocking, 0);
  pthread_t killer_thread;
  struct killer k = {child, s};
  CHECK(pthread_create(&killer_thread, NULL, killer_main, &k) == 0, "pthread_create");
  hang_guard(15, what);
  long end = 0;
  switch (s) {
    case CHILD_SENDS:
      end = receive_until_death(fd);
      CHECK(atomic_load(&g_progress) >= KILL_AFTER, "%s: the stream ended after %zu bytes, "
            "before the kill", what, atomic_load(&g_progress));
      break;
    case CHILD_READS:
    case BLOCKED_SEND:
      atomic_store(&g_blocking, 1);  // the ring fills long before the killer's 300 ms
      // The child reads at most what the survivor sent; the survivor sends until it fails.
      end = send_until_death(fd, (size_t)1 << 30);
      CHECK(end == -EPIPE || end == -ECONNRESET, "%s: send ended with %ld (%s), want EPIPE "
            "or ECONNRESET", what, end, strerror((int)-end));
      break;
    case BLOCKED_RECV:
      read_exact(fd, g_buf, QUIET_BYTES);
      check_pattern(g_buf, QUIET_BYTES, BULK_SEED, 0, "the quiet child's bytes");
      atomic_store(&g_blocking, 1);
      end = receive_until_death(fd);
      break;
    case ECHO:
      break;
  }
  if (s == CHILD_SENDS || s == BLOCKED_RECV)
    CHECK(end == 0 || end == -ECONNRESET, "%s: recv ended with %ld (%s), want EOF or "
          "ECONNRESET", what, end, strerror((int)-end));
  CHECK(pthread_join(killer_thread, NULL) == 0, "pthread_join");
  expect_killed(child, what);
  // Once the death was seen, further calls fail at once as well.
  ssize_t again = recv(fd, g_buf, 1, MSG_DONTWAIT);
  CHECK(again <= 0, "%s: recv after the death returned %zd", what, again);
  hang_guard(0, "");
  SYS(close(fd));
  // (Pooled segments of the dead peer's channel stay until the next dial there finds it
  // dead: counted apart, and bounded.)
  CHECK(count_unpooled_fds() == fds_before, "%s: %d descriptors after close, %d before", what,
        count_unpooled_fds(), fds_before);
  CHECK(unpooled_segment_mappings() == maps_before, "%s: %d shm mappings after close, %d before",
        what, unpooled_segment_mappings(), maps_before);
  check_pool_bound(what);
  ok("%s: %zu bytes moved before the end, which was %s", what, atomic_load(&g_progress),
     end == 0 ? "EOF" : strerror((int)-end));
}

// Before and after all the deaths, a new connection works: 1 MiB there and back, intact.
static void run_echo(enum role r) {
  pid_t child;
  int fd = connect_child(r, ECHO, &child);
  hang_guard(15, "the echo after the faults");
  static char out[ECHO_BYTES];
  fill_pattern(out, ECHO_BYTES, 11, 0);
  write_all(fd, out, ECHO_BYTES);
  read_exact(fd, g_buf, ECHO_BYTES);
  check_pattern(g_buf, ECHO_BYTES, 11, 0, "the echo");
  SYS(shutdown(fd, SHUT_WR));
  wait_child_ok(child, "the echo child");
  hang_guard(0, "");
  SYS(close(fd));
  ok("%s: a new connection after the faults echoed 1 MiB intact", role_names[r]);
}

int main(void) {
  prog_init("fault_kill");
  signal(SIGPIPE, SIG_IGN);  // a send to a dead peer must fail with EPIPE, as servers expect
  // First a clean connection of each kind: the library's lazily created descriptors (stats,
  // the connector's probe socket) exist before the cases count descriptors.
  run_echo(CHILD_CONNECTS);
  run_echo(CHILD_ACCEPTS);
  for (int r = CHILD_CONNECTS; r <= CHILD_ACCEPTS; r++)
    for (int s = CHILD_SENDS; s <= BLOCKED_RECV; s++) run_case((enum role)r, (enum situation)s);
  run_echo(CHILD_CONNECTS);
  run_echo(CHILD_ACCEPTS);
  return 0;
}
