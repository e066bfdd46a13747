/* Shared helpers for the overhead benchmarks (bench_fileio.c, bench_tcp.c).
 *
 * Every program prints exactly one machine-readable line on success:
 *   result workload=<name> metric=<name> unit=<unit> value=<best batch> preloaded=<0|1>
 *          median=<median batch> <extra>
 * bench/overhead.sh parses it. `preloaded` says whether libfastsock is mapped into the
 * process, so the driver can check that the "with" runs really ran under the library and the
 * "without" runs really did not (otherwise a ratio of 1.00 would prove nothing).
 *
 * Header-only on purpose: each benchmark is a single small C file plus this header.
 */
#ifndef FASTSOCK_BENCH_COMMON_H
#define FASTSOCK_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void bench_die(const char *what) {
  fprintf(stderr, "bench: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(1);
}

/* 1 when a library whose path contains "libfastsock" is mapped into this process. */
static inline int bench_library_loaded(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return 0;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, maps))
    found = strstr(line, "libfastsock") != NULL;
  fclose(maps);
  return found;
}

/* Pins the calling thread to one CPU; cpu < 0 leaves scheduling alone. Failure is reported
 * but not fatal: an unpinned run is still a valid (noisier) measurement. */
static inline void bench_pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    fprintf(stderr, "bench: cannot pin to CPU %d: %s (continuing unpinned)\n", cpu,
            strerror(errno));
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n values; sorts the array in place. */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Batch statistics. A run reports its best batch (lowest time, highest rate), as NetPIPE
 * does: on a shared machine, interference from other processes only ever adds time, so the
 * best batch is the closest estimate of the code's own cost. The median is printed too. */
struct bench_summary {
  double best, median;
};

static inline struct bench_summary bench_summarize(double *v, int n, int higher_is_better) {
  struct bench_summary s;
  s.median = bench_median(v, n); /* sorts ascending */
  s.best = higher_is_better ? v[n - 1] : v[0];
  return s;
}

/* A positive integer option value, or exit with a usage message. */
static inline long bench_parse_count(const char *opt, const char *text) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || !end || *end || v <= 0) {
    fprintf(stderr, "bench: %s needs a positive integer, got '%s'\n", opt, text);
    exit(2);
  }
  return v;
}

/* Kills the process (SIGALRM's default action) if a run hangs: benchmarks are bounded. */
static inline void bench_arm_timeout(unsigned seconds) {
  signal(SIGALRM, SIG_DFL);
  alarm(seconds);
}

static inline void bench_print_result(const char *workload, const char *metric,
                                      const char *unit, struct bench_summary s,
                                      const char *extra) {
  printf("result workload=%s metric=%s unit=%s value=%.4f preloaded=%d median=%.4f %s\n",
         workload, metric, unit, s.best, bench_library_loaded(), s.median, extra ? extra : "");
  fflush(stdout);
}

#endif
