// bench_idle_conns N: what N idle connections between two processes cost each process.
//
// This process listens; a forked child connects N times. Every connection carries one byte
// each way (so under fastsock it is on the shm link, fully set up), then all sit idle while
// both processes measure themselves against their own state before the N connections (taken
// after one warm-up connection, so that the library's one-time costs are not counted):
//   fds      open descriptors (/proc/self/fd)
//   anon     RssAnon (private memory) in KiB          shmem  RssShmem in KiB
//   vm       VmSize (address space) in KiB
//   seg_maps mappings of the shm segment memfd "fastsock-shm" (/proc/self/smaps)
//   seg_pss  their Pss in KiB (shared pages split between the two mappers: the sum over
//            both processes is the shared memory itself)   seg_rss their Rss in KiB
//   slab     the system's Slab (kernel objects: sockets, files) in KiB, before and after —
//            system-wide, so other activity on the machine shows up in it
// Each process prints one line "usage role=server|client n=N key=before:after ...".
// With --app-limit, the soft RLIMIT_NOFILE is set to what the program itself needs (N + 64),
// as servers size it for their clients (redis: maxclients + 32), the hard limit kept: where
// the hard limit is higher, the library's descriptors fit above the soft one (docs/shm.md,
// "Above the limit").
// The program is plain C and does not link fastsock: bench/shm-memory.sh runs it with and
// without LD_PRELOAD. Exit status 0 when all N connections were made and checked.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char* what) {
  fprintf(stderr, "bench_idle_conns[%d]: %s: %s\n", (int)getpid(), what, strerror(errno));
  exit(1);
}

struct usage {
  long fds, anon, shmem, vm, seg_maps, seg_pss, seg_rss, slab;
};

static long count_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) die("opendir /proc/self/fd");
  long n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;
}

static long field_kib(const char* file, const char* key) {
  FILE* f = fopen(file, "r");
  if (!f) die(file);
  char line[256];
  long v = -1;
  size_t klen = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
      v = atol(line + klen + 1);
      break;
    }
  fclose(f);
  return v;
}

static void segment_usage(struct usage* u) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (!f) die("/proc/self/smaps");
  char line[512];
  int in_segment = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ' ')) {
      in_segment = strstr(line, "/memfd:fastsock-shm") != NULL;
      u->seg_maps += in_segment;
    } else if (in_segment && strncmp(line, "Pss:", 4) == 0) {
      u->seg_pss += atol(line + 4);
    } else if (in_segment && strncmp(line, "Rss:", 4) == 0) {
      u->seg_rss += atol(line + 4);
    }
  }
  fclose(f);
}

static struct usage measure(void) {
  struct usage u = {0};
  u.fds = count_fds();
  u.anon = field_kib("/proc/self/status", "RssAnon");
  u.shmem = field_kib("/proc/self/status", "RssShmem");
  u.vm = field_kib("/proc/self/status", "VmSize");
  u.slab = field_kib("/proc/meminfo", "Slab");
  segment_usage(&u);
  return u;
}

static void report(const char* role, long n, struct usage a, struct usage b, double secs) {
  printf("usage role=%s n=%ld fds=%ld:%ld anon=%ld:%ld shmem=%ld:%ld vm=%ld:%ld "
         "seg_maps=%ld:%ld seg_pss=%ld:%ld seg_rss=%ld:%ld slab=%ld:%ld setup_s=%.3f\n",
         role, n, a.fds, b.fds, a.anon, b.anon, a.shmem, b.shmem, a.vm, b.vm, a.seg_maps,
         b.seg_maps, a.seg_pss, b.seg_pss, a.seg_rss, b.seg_rss, a.slab, b.slab, secs);
  fflush(stdout);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void xfer(int fd, int send_first) {
  char b = 'x';
  for (int step = 0; step < 2; step++) {
    ssize_t n = (step == 0) == send_first ? write(fd, &b, 1) : read(fd, &b, 1);
    if (n != 1) die("one-byte exchange");
  }
}

static int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) die("connect");
  return fd;
}

// Per connection and process: the socket, and under fastsock two eventfds (and the memfd
// while the connection is set up); plus slack for the library's own descriptors. Raised as
// far as the hard limit allows (raising that needs CAP_SYS_RESOURCE): when it is too low
// the run shows what happens then (connections that stay on TCP, or EMFILE).
static void raise_nofile(long n, int app_limit) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) die("getrlimit");
  const rlim_t want = (rlim_t)(app_limit ? n + 64 : 4 * n + 256);
  if (app_limit && want <= rl.rlim_max) {  // lowered too: exactly what the program needs
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) die("setrlimit RLIMIT_NOFILE");
    return;
  }
  if (rl.rlim_cur >= want) return;
  struct rlimit up = {want, rl.rlim_max > want ? rl.rlim_max : want};
  if (setrlimit(RLIMIT_NOFILE, &up) == 0) return;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) die("setrlimit RLIMIT_NOFILE");
  fprintf(stderr, "bench_idle_conns: RLIMIT_NOFILE is %lu (hard limit), below the %lu wanted "
          "for %ld connections\n", (unsigned long)rl.rlim_cur, (unsigned long)want, n);
}

int main(int argc, char** argv) {
  const int app_limit = argc == 3 && strcmp(argv[2], "--app-limit") == 0;
  if ((argc != 2 && !app_limit) || atol(argv[1]) <= 0) {
    fprintf(stderr, "usage: bench_idle_conns N [--app-limit]\n");
    return 2;
  }
  const long n = atol(argv[1]);
  raise_nofile(n, app_limit);
  int* fds = calloc((size_t)n, sizeof *fds);
  if (!fds) die("calloc");
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(lfd, (struct sockaddr*)&a, sizeof a) != 0 || listen(lfd, 4096) != 0 ||
      getsockname(lfd, (struct sockaddr*)&a, &al) != 0)
    die("listen");
  const uint16_t port = ntohs(a.sin_port);
  int ready[2], done[2];  // child -> parent: measured; parent -> child: may exit
  if (pipe(ready) != 0 || pipe(done) != 0) die("pipe");
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  const int client = pid == 0;
  if (client) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(lfd);
  }
  // Warm-up: the library's one-time descriptors and tables exist before the baseline.
  int w = client ? connect_to(port) : accept(lfd, NULL, NULL);
  if (w < 0) die("warm-up");
  xfer(w, client);
  close(w);
  const struct usage before = measure();
  const double t0 = now_s();
  for (long i = 0; i < n; i++) {
    fds[i] = client ? connect_to(port) : accept(lfd, NULL, NULL);
    if (fds[i] < 0) {
      fprintf(stderr, "bench_idle_conns: connection %ld of %ld: ", i + 1, n);
      die(client ? "connect" : "accept");
    }
    xfer(fds[i], client);
  }
  const double secs = now_s() - t0;
  const struct usage after = measure();
  char b = 0;
  if (client) {
    report("client", n, before, after, secs);
    if (write(ready[1], "m", 1) != 1 || read(done[0], &b, 1) != 1) die("sync");
    exit(0);  // all connections still open: closing 10,000 is not what is measured
  }
  if (read(ready[0], &b, 1) != 1) die("sync");  // both measured while all are open
  report("server", n, before, after, secs);
  if (write(done[1], "d", 1) != 1) die("sync");
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "bench_idle_conns: the client failed (status %#x)\n", status);
    return 1;
  }
  return 0;
}
