/* What a fork costs a process whose connections are on a link: fork() moves each of them
 * to TCP first (the library's fork hook). bench/verbs-fork.sh runs it over the verbs link.
 *
 *   bench_fork_conns ADDR PORT CONNS ROUNDS [tcp]
 *
 * Each round: CONNS connections from this process to a server process (forked at start),
 * one byte each way on every connection once the library reports it on a link (so that both
 * directions switched), then one timed fork() (the child exits at once; the time is
 * fork()'s return in the parent, the hook's downgrades included), then all closed.
 * Prints one line per round and
 *   result workload=fork_conns metric=fork_us unit=us value=<best> preloaded=<0|1>
 *          median=<median> conns=<CONNS> linked=<connections seen on a link>
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "bench_common.h"

typedef const char* (*transport_fn)(int);

static transport_fn transport(void) {
  static transport_fn fn;
  static int looked;
  if (!looked) {
    void* sym = dlsym(RTLD_DEFAULT, "fastsock_transport");
    memcpy(&fn, &sym, sizeof fn);  // ISO C has no cast from void* to a function pointer
    looked = 1;
  }
  return fn;
}

/* Waits up to 10 s for the library to carry fd on a link other than TCP; 1 if it does. */
static int on_tcp_only;  // `tcp`: the connections stay on TCP, nothing to wait for

static int wait_linked(int fd) {
  transport_fn fn = transport();
  if (!fn || on_tcp_only) return 0;
  for (int i = 0; i < 1000; ++i) {
    const char* t = fn(fd);
    if (t && strcmp(t, "tcp") != 0) return 1;
    usleep(10 * 1000);
  }
  return 0;
}

static void one_byte(int fd, int send_first) {
  char c = 'x';
  if (send_first && write(fd, &c, 1) != 1) bench_die("write");
  if (read(fd, &c, 1) != 1) bench_die("read");
  if (!send_first && write(fd, &c, 1) != 1) bench_die("write");
}

static void serve(int ls, int conns, int rounds) {
  int* fds = calloc((size_t)conns, sizeof *fds);
  struct pollfd* p = calloc((size_t)conns, sizeof *p);
  if (!fds || !p) bench_die("calloc");
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < conns; ++i) {
      fds[i] = accept(ls, NULL, NULL);
      if (fds[i] < 0) bench_die("accept");
      (void)wait_linked(fds[i]);
      one_byte(fds[i], 0);
    }
    for (int open = conns; open > 0;) {  // until each one's end of stream
      for (int i = 0; i < conns; ++i) p[i] = (struct pollfd){fds[i], POLLIN, 0};
      if (poll(p, (nfds_t)conns, -1) < 0) bench_die("poll");
      for (int i = 0; i < conns; ++i) {
        char c;
        if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (read(fds[i], &c, 1) > 0) continue;
        close(fds[i]);
        fds[i] = -1;
        --open;
      }
    }
  }
  _exit(0);
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && strcmp(argv[5], "tcp") == 0)) {
    fprintf(stderr, "usage: bench_fork_conns ADDR PORT CONNS ROUNDS [tcp]\n");
    return 2;
  }
  on_tcp_only = argc == 6;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
  const int conns = atoi(argv[3]), rounds = atoi(argv[4]);
  if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 || conns < 1 || rounds < 1) {
    fprintf(stderr, "bench_fork_conns: bad arguments\n");
    return 2;
  }
  // The server listens itself: a listener inherited over fork has its RDMA listener in
  // the process that listened, which this one's timed forks would disturb.
  int ready[2];
  if (pipe(ready) != 0) bench_die("pipe");
  const pid_t server = fork();
  if (server < 0) bench_die("fork");
  if (server == 0) {
    const int ls = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(ls, conns) != 0)
      bench_die("listen");
    if (write(ready[1], "r", 1) != 1) bench_die("write");
    serve(ls, conns, rounds);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) bench_die("the server did not start");
  int* fds = calloc((size_t)conns, sizeof *fds);
  double* us = calloc((size_t)rounds, sizeof *us);
  if (!fds || !us) bench_die("calloc");
  int linked = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < conns; ++i) {
      fds[i] = socket(AF_INET, SOCK_STREAM, 0);
      if (fds[i] < 0 || connect(fds[i], (struct sockaddr*)&sa, sizeof sa) != 0)
        bench_die("connect");
      linked += wait_linked(fds[i]);
      one_byte(fds[i], 1);
    }
    const double t0 = bench_now_ns();
    const pid_t child = fork();
    if (child < 0) bench_die("fork");
    if (child == 0) _exit(0);
    us[r] = (bench_now_ns() - t0) / 1e3;
    if (waitpid(child, NULL, 0) != child) bench_die("waitpid");
    for (int i = 0; i < conns; ++i) close(fds[i]);
    printf("round %d: fork with %d connections: %.1f us\n", r + 1, conns, us[r]);
  }
  int status = 0;
  if (waitpid(server, &status, 0) != server || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    bench_die("the server process failed");
  qsort(us, (size_t)rounds, sizeof *us, cmp_double);
  printf("result workload=fork_conns metric=fork_us unit=us value=%.1f preloaded=%d median=%.1f "
         "conns=%d linked=%d\n",
         us[0], bench_library_loaded(), us[rounds / 2], conns, linked);
  return 0;
}
