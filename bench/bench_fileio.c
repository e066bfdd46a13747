/* bench_fileio: the cost of the library's hooks on descriptors that are NOT sockets.
 *
 * Every read()/write() a program makes goes through libfastsock's hooks, which must look the
 * fd up and hand it straight to the kernel when it is not a tracked TCP socket. This program
 * makes many small calls on a regular file (tmpfs by default, so the kernel side is as cheap
 * and steady as it gets and the hook cost is the largest possible share) and reports the mean
 * wall time per call of its best batch (see bench_summarize).
 *
 * One iteration = 16 x write(64 B), lseek, 16 x read(64 B), pread(64 B), pwrite(64 B),
 * lseek: 36 calls, 32 of them read()/write(), the calls every program makes most and the
 * ones the library hooks (pread, pwrite and lseek are not in its list, design section 7).
 *
 * usage: bench_fileio [--iterations N] [--batches B] [--warmup N] [--dir DIR] [--cpu C]
 *
 * --warmup (default iterations/10) iterations run untimed first; --warmup 0 with --batches 1
 * makes the call count exact, which bench/overhead.sh uses for callgrind instruction counts.
 */
#include "bench_common.h"

#include <fcntl.h>
#include <sys/types.h>

enum { BLOCK = 64, BLOCKS = 16, CALLS_PER_ITERATION = 2 * BLOCKS + 4, MAX_BATCHES = 1000 };

static void check_io(ssize_t got, const char *what) {
  if (got != BLOCK) {
    if (got >= 0) errno = 0;
    bench_die(what);
  }
}

static void check_seek(off_t got) {
  if (got != 0) bench_die("lseek");
}

static void run_iterations(int fd, long iterations, char *buf) {
  for (long i = 0; i < iterations; ++i) {
    buf[0] = (char)i;
    for (int b = 0; b < BLOCKS; ++b) check_io(write(fd, buf, BLOCK), "write");
    check_seek(lseek(fd, 0, SEEK_SET));
    for (int b = 0; b < BLOCKS; ++b) check_io(read(fd, buf, BLOCK), "read");
    check_io(pread(fd, buf, BLOCK, BLOCK), "pread");
    check_io(pwrite(fd, buf, BLOCK, BLOCK), "pwrite");
    check_seek(lseek(fd, 0, SEEK_SET));
  }
}

int main(int argc, char **argv) {
  long iterations = 2000;
  long batches = 20;
  long warmup = -1;
  const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  int cpu = -1;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--iterations") && val) iterations = bench_parse_count(arg, val), ++i;
    else if (!strcmp(arg, "--batches") && val) batches = bench_parse_count(arg, val), ++i;
    else if (!strcmp(arg, "--warmup") && val) warmup = atol(val), ++i;
    else if (!strcmp(arg, "--dir") && val) dir = val, ++i;
    else if (!strcmp(arg, "--cpu") && val) cpu = atoi(val), ++i;
    else {
      fprintf(stderr,
              "usage: %s [--iterations N] [--batches B] [--warmup N] [--dir DIR] [--cpu C]\n",
              argv[0]);
      return 2;
    }
  }
  if (batches > MAX_BATCHES) batches = MAX_BATCHES;
  if (warmup < 0) warmup = iterations / 10;
  bench_arm_timeout(300);
  bench_pin(cpu);

  char path[4096];
  snprintf(path, sizeof path, "%s/fastsock-bench-fileio.%d", dir, (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) bench_die(path);
  unlink(path); /* nothing is left behind, even if we are killed */

  char buf[BLOCK];
  memset(buf, 'x', sizeof buf);
  for (int b = 0; b < BLOCKS; ++b) check_io(pwrite(fd, buf, BLOCK, (off_t)b * BLOCK), "pwrite");

  run_iterations(fd, warmup, buf); /* page cache, lazy symbol binding, branch predictors */
  double per_call[MAX_BATCHES];
  for (long b = 0; b < batches; ++b) {
    double t0 = bench_now_ns();
    run_iterations(fd, iterations, buf);
    per_call[b] = (bench_now_ns() - t0) / (double)(iterations * CALLS_PER_ITERATION);
  }
  close(fd);

  char extra[128];
  snprintf(extra, sizeof extra, "calls=%ld batches=%ld", iterations * CALLS_PER_ITERATION,
           batches);
  bench_print_result("fileio", "ns_per_call", "ns", bench_summarize(per_call, (int)batches, 0),
                     extra);
  return 0;
}
