// A hostile peer scribbles over the connection's shared segment; the victim stays healthy.
//
// The hostile end is a forked child, once the connector (which created the segment) and
// once the acceptor. Once its connection is on the shm link it finds the segment's mapping
// in its own /proc/self/maps (the memfd "fastsock-shm", shm/shm_segment.cc) and overwrites
// it — random bytes, all 0xff, all zeros, huge ring indices and windows, a forged handoff
// descriptor pointing into the victim, or random writes at random offsets for 300 ms while
// both ends move data — then keeps using the socket (sends, reads, closes).
// The victim (this process) is receiving and sending while that happens. It must not crash
// or hang (hang guard): each of its calls ends with data, end of stream or an error. After
// each round its descriptors and shm mappings are back to what they were, and at the end a
// new connection carries 1 MiB both ways correctly on the shm link.
// Without the library there is no segment: the child says so and the rest runs as on TCP.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum pattern { RANDOM, ONES, ZEROS, INDICES, HANDOFF, STORM, PATTERNS };
static const char* const pattern_names[] = {
    "random bytes", "all 0xff", "all zeros", "huge indices and windows",
    "forged handoff descriptor", "random writes during traffic"};

// Offsets in the segment (docs/shm.md, "Layout (version 1)").
enum {
  DIR0 = 64, DIR_STRIDE = 256,
  TAIL = 0, WINDOW = 8, FIN = 12, SWITCH_OFFSET = 16, HEAD = 64, CONSUMED = 72,
  READ_CLOSED = 80, STATE = 128, HANDOFF_CTL = 192, HANDOFF_PID = 200,
  HANDOFF_ADDRESS = 208, HANDOFF_LENGTH = 216, HANDOFF_POSITION = 224,
  SIDE0 = 576, SIDE_STRIDE = 64,
};

static char g_buf[1 << 20];

struct segment {
  unsigned char* base;
  size_t len;
};

// The one shm segment this process has mapped (the child maps none before its connection).
static int find_segment(struct segment* seg) {
  FILE* f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL, "fopen(/proc/self/maps)");
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "/memfd:fastsock-shm")) continue;
    unsigned long lo, hi;
    CHECK(sscanf(line, "%lx-%lx", &lo, &hi) == 2, "parse %s", line);
    CHECK(strncmp(strchr(line, ' ') + 1, "rw", 2) == 0, "the segment is not writable: %s", line);
    seg->base = (unsigned char*)lo;
    seg->len = hi - lo;
    n++;
  }
  fclose(f);
  return n;
}

static void put64(struct segment* s, size_t off, uint64_t v) { memcpy(s->base + off, &v, 8); }
static void put32(struct segment* s, size_t off, uint32_t v) { memcpy(s->base + off, &v, 4); }

static atomic_int g_storm_on;

static void* storm_main(void* arg) {
  struct segment* s = arg;
  unsigned seed = 12345;
  while (atomic_load(&g_storm_on)) {
    size_t off = (size_t)rand_r(&seed) % s->len;
    uint32_t v = (uint32_t)rand_r(&seed) * 2654435761u;
    size_t room = s->len - off < 4 ? s->len - off : 4;
    memcpy(s->base + off, &v, room);
  }
  return NULL;
}

// side: 0 if this (hostile) end is the connector. Corrupts and keeps using the socket.
static _Noreturn void hostile_child(int fd, int side, enum pattern p) {
  struct segment seg;
  const int found = fastsock_present() ? find_segment(&seg) : 0;
  if (fastsock_present()) CHECK(found == 1, "the child maps %d shm segments, want 1", found);
  if (!found) note_skip("no library, no segment: '%s' runs as plain TCP", pattern_names[p]);
  sleep_ms(50);  // the victim is in its calls by now
  pthread_t storm;
  if (found) {
    unsigned seed = (unsigned)p * 7919u + (unsigned)side;
    switch (p) {
      case RANDOM:
        for (size_t i = 0; i < seg.len; i++) seg.base[i] = (unsigned char)rand_r(&seed);
        break;
      case ONES: memset(seg.base, 0xff, seg.len); break;
      case ZEROS: memset(seg.base, 0, seg.len); break;
      case INDICES:
        for (int d = 0; d < 2; d++) {
          size_t dir = DIR0 + DIR_STRIDE * (size_t)d;
          put64(&seg, dir + TAIL, (uint64_t)1 << 62);
          put32(&seg, dir + WINDOW, 1u << 31);
          put64(&seg, dir + SWITCH_OFFSET, (uint64_t)1 << 60);
          put64(&seg, dir + HEAD, ((uint64_t)1 << 62) + 12345);
          put64(&seg, dir + CONSUMED, UINT64_MAX);
          put32(&seg, dir + STATE, 0xdeadbeef);
        }
        break;
      case HANDOFF: {
        // In the direction this end sends: "read 1 GiB at 0x10000 of the victim's memory".
        size_t dir = DIR0 + DIR_STRIDE * (size_t)side;
        uint64_t tail;
        memcpy(&tail, seg.base + dir + TAIL, 8);
        put32(&seg, dir + HANDOFF_PID, (uint32_t)getppid());
        put64(&seg, dir + HANDOFF_ADDRESS, 0x10000);
        put64(&seg, dir + HANDOFF_LENGTH, (uint64_t)1 << 30);
        put64(&seg, dir + HANDOFF_POSITION, tail);
        put64(&seg, dir + HANDOFF_CTL, 1u | (77u << 8));  // posted, a new sequence
        // And ask the victim to wake up for everything.
        put32(&seg, SIDE0 + SIDE_STRIDE * (size_t)(1 - side), 3);
        put32(&seg, SIDE0 + SIDE_STRIDE * (size_t)(1 - side) + 4, 3);
        break;
      }
      case STORM:
        atomic_store(&g_storm_on, 1);
        CHECK(pthread_create(&storm, NULL, storm_main, &seg) == 0, "pthread_create");
        break;
      case PATTERNS: break;
    }
  }
  // Keep using the socket: send, read for a while, close. Whatever the calls return is
  // fine here: this end broke its own connection.
  fill_pattern(g_buf, 4096, 3, 0);
  (void)send(fd, g_buf, 4096, MSG_DONTWAIT);
  struct timeval tv = {0, 100 * 1000};
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (int i = 0; i < 3; i++) (void)recv(fd, g_buf, sizeof g_buf, 0);
  if (found && p == STORM) {
    atomic_store(&g_storm_on, 0);
    pthread_join(storm, NULL);
  }
  close(fd);
  exit(0);
}

static atomic_long g_send_end;

// The victim's sender: 4 MiB in 64 KiB pieces, or until a send fails.
static void* victim_sender(void* arg) {
  int fd = *(int*)arg;
  static char out[65536];
  fill_pattern(out, sizeof out, 5, 0);
  long end = 0;
  for (size_t sent = 0; sent < (4u << 20);) {
    ssize_t n = send(fd, out, sizeof out, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      end = -errno;
      break;
    }
    CHECK(n > 0, "send returned 0");
    sent += (size_t)n;
  }
  atomic_store(&g_send_end, end);
  return NULL;
}

static const char* outcome(long rc) { return rc == 0 ? "ok/EOF" : strerror((int)-rc); }

static void run_round(int child_accepts, enum pattern p) {
  char what[160];
  snprintf(what, sizeof what, "hostile %s, %s", child_accepts ? "acceptor" : "connector",
           pattern_names[p]);
  const int fds_before = count_unpooled_fds();
  const int maps_before = unpooled_segment_mappings();
  int child;
  int fd = fork_connected(child_accepts, &child);
  if (child == 0) hostile_child(fd, child_accepts ? 1 : 0, p);
  hang_guard(20, what);
  pthread_t sender;
  atomic_store(&g_send_end, 1);
  CHECK(pthread_create(&sender, NULL, victim_sender, &fd) == 0, "pthread_create");
  size_t received = 0;
  long recv_end = 0;
  for (;;) {
    ssize_t n = recv(fd, g_buf, sizeof g_buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      recv_end = n < 0 ? -errno : 0;
      break;
    }
    received += (size_t)n;
  }
  CHECK(recv_end == 0 || recv_end == -ECONNRESET, "%s: recv ended with %s", what,
        outcome(recv_end));
  if (fastsock_present() && p <= INDICES) {
    // No valid ring survives these (the windows are no power of two, or the indices lie),
    // and the child sent nothing before it scribbled: the victim must deliver no byte of it.
    // It ends the stream (a scribbled FIN flag may be seen first) or resets and says why.
    CHECK(received == 0, "%s: the victim took %zu bytes from the scribbled ring", what,
          received);
    if (recv_end == -ECONNRESET)
      expect_log("fd=%d falls back to tcp (shm: broken: the |ring is corrupt)", fd);
  }
  CHECK(pthread_join(sender, NULL) == 0, "pthread_join");
  const long send_end = atomic_load(&g_send_end);
  CHECK(send_end == 0 || send_end == -EPIPE || send_end == -ECONNRESET,
        "%s: send ended with %s", what, outcome(send_end));
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child, "waitpid");
  hang_guard(0, "");
  SYS(close(fd));
  // (Pooled segments of the dead peer's channel stay until the next dial there finds it
  // dead: counted apart, and bounded.)
  CHECK(count_unpooled_fds() == fds_before, "%s: %d descriptors after close, %d before", what,
        count_unpooled_fds(), fds_before);
  CHECK(unpooled_segment_mappings() == maps_before, "%s: %d shm mappings after close, %d before",
        what, unpooled_segment_mappings(), maps_before);
  check_pool_bound(what);
  ok("%s: victim received %zu bytes then %s, its sends ended %s; the hostile child %s %d",
     what, received, recv_end ? outcome(recv_end) : "EOF", outcome(send_end),
     WIFEXITED(status) ? "exited" : "was killed by signal",
     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

// A clean connection: 1 MiB there and back, intact, on the link both ends take.
static void run_echo(int child_accepts) {
  int child;
  int fd = fork_connected(child_accepts, &child);
  if (child == 0) {
    read_exact(fd, g_buf, 1 << 20);
    write_all(fd, g_buf, 1 << 20);
    CHECK(read(fd, g_buf, 1) == 0, "EOF after the echo");
    exit(0);
  }
  hang_guard(15, "the echo");
  static char out[1 << 20];
  fill_pattern(out, sizeof out, 11, 0);
  write_all(fd, out, sizeof out);
  read_exact(fd, g_buf, sizeof out);
  check_pattern(g_buf, sizeof out, 11, 0, "the echo");
  SYS(shutdown(fd, SHUT_WR));
  wait_child_ok(child, "the echo child");
  hang_guard(0, "");
  SYS(close(fd));
  ok("the %s child echoed 1 MiB intact", child_accepts ? "accepting" : "connecting");
}

int main(void) {
  prog_init("fault_corrupt");
  signal(SIGPIPE, SIG_IGN);
  run_echo(0);  // the library's lazily created descriptors exist before the rounds count
  run_echo(1);
  for (int child_accepts = 0; child_accepts < 2; child_accepts++)
    for (int p = RANDOM; p < PATTERNS; p++) run_round(child_accepts, (enum pattern)p);
  run_echo(0);  // the victim is healthy: new connections work
  run_echo(1);
  return 0;
}
