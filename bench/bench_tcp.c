/* bench_tcp: TCP pass-through cost over loopback, both ends in the measured configuration.
 *
 * The process listens on 127.0.0.1:<ephemeral>, then fork()s: the parent is the server, the
 * child the client, so under LD_PRELOAD both ends run under the library (as two ordinary
 * processes would). The client does the timing and prints the result line: the best of
 * --batches timed batches (see bench_summarize), after an untimed warm-up.
 *
 *   pingpong  1-byte write/read ping-pong with TCP_NODELAY: half round-trip latency (us)
 *   bulk      the client sends --bytes in --chunk writes, the server acks each batch with one
 *             byte: bandwidth (MB/s, 1 MB = 1e6 bytes)
 *   connect   socket/connect/read 1 byte/close loop; the server accept()s, writes 1 byte and
 *             closes: connections per second. The client closes with SO_LINGER 0 (an RST),
 *             so no TIME_WAIT piles up and the ephemeral port range is never exhausted.
 *
 * usage: bench_tcp pingpong|bulk|connect [--iterations N] [--batches B] [--warmup N]
 *                  [--bytes N] [--chunk N] [--connections N] [--cpus SERVER,CLIENT]
 *
 * --warmup: untimed round trips (pingpong; default iterations/10) or connections (connect;
 * default connections/10) first. bulk always warms up with one batch of at most 64 MiB.
 */
#include "bench_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>

enum { MAX_BATCHES = 1000 };

struct options {
  const char *mode;
  long iterations;   /* pingpong: round trips per batch */
  long warmup;       /* pingpong, connect: untimed round trips / connections; -1: default */
  long batches;
  long bytes;        /* bulk: bytes per batch */
  long chunk;        /* bulk: bytes per write() */
  long connections;  /* connect: connections per batch */
  int server_cpu, client_cpu;
};

static void write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) bench_die("write");
    buf += n;
    len -= (size_t)n;
  }
}

/* Reads exactly len bytes; returns 0 on a clean EOF before the first byte, 1 otherwise. */
static int read_exact(int fd, char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) bench_die("read");
    if (n == 0) {
      if (got == 0) return 0;
      errno = 0;
      bench_die("read: unexpected EOF");
    }
    got += (size_t)n;
  }
  return 1;
}

static void set_nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    bench_die("setsockopt TCP_NODELAY");
}

static int make_listener(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) bench_die("socket");
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) bench_die("bind");
  if (listen(fd, 512) != 0) bench_die("listen");
  socklen_t len = sizeof addr;
  if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0) bench_die("getsockname");
  *port = ntohs(addr.sin_port);
  return fd;
}

static int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) bench_die("socket");
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
    if (errno != EINTR) bench_die("connect");
  return fd;
}

static int accept_one(int listener) {
  for (;;) {
    int fd = accept(listener, NULL, NULL);
    if (fd >= 0) return fd;
    if (errno != EINTR && errno != ECONNABORTED) bench_die("accept");
  }
}

/* ---- pingpong ---------------------------------------------------------------------- */

static void pingpong_server(int listener) {
  int fd = accept_one(listener);
  set_nodelay(fd);
  char byte;
  while (read_exact(fd, &byte, 1)) write_all(fd, &byte, 1);
  close(fd);
}

static void pingpong_rounds(int fd, long n) {
  char byte = 'p';
  for (long i = 0; i < n; ++i) {
    write_all(fd, &byte, 1);
    if (!read_exact(fd, &byte, 1)) bench_die("pingpong: server closed");
  }
}

static void pingpong_client(uint16_t port, const struct options *o) {
  int fd = connect_to(port);
  set_nodelay(fd);
  pingpong_rounds(fd, o->warmup >= 0 ? o->warmup : o->iterations / 10);
  double half_rtt_us[MAX_BATCHES];
  for (long b = 0; b < o->batches; ++b) {
    double t0 = bench_now_ns();
    pingpong_rounds(fd, o->iterations);
    half_rtt_us[b] = (bench_now_ns() - t0) / (2.0 * (double)o->iterations) / 1e3;
  }
  close(fd);
  char extra[128];
  snprintf(extra, sizeof extra, "round_trips=%ld batches=%ld", o->iterations, o->batches);
  bench_print_result("tcp_pingpong", "half_rtt_us", "us",
                     bench_summarize(half_rtt_us, (int)o->batches, 0), extra);
}

/* ---- bulk -------------------------------------------------------------------------- */

/* Batch 0 is a warm-up of at most 64 MiB; batches 1..B are measured. */
static long bulk_batch_bytes(const struct options *o, long batch) {
  long warmup = 64L << 20;
  return batch == 0 && o->bytes > warmup ? warmup : o->bytes;
}

static void bulk_server(int listener, const struct options *o) {
  int fd = accept_one(listener);
  char *buf = malloc((size_t)o->chunk);
  if (!buf) bench_die("malloc");
  for (long b = 0; b <= o->batches; ++b) {
    long left = bulk_batch_bytes(o, b);
    while (left > 0) {
      ssize_t n = read(fd, buf, (size_t)(left < o->chunk ? left : o->chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) bench_die("bulk: read");
      left -= n;
    }
    write_all(fd, "a", 1); /* ack: the whole batch has arrived */
  }
  free(buf);
  close(fd);
}

static void bulk_send_batch(int fd, char *buf, long bytes, long chunk) {
  for (long left = bytes; left > 0; left -= chunk)
    write_all(fd, buf, (size_t)(left < chunk ? left : chunk));
  char ack;
  if (!read_exact(fd, &ack, 1)) bench_die("bulk: server closed");
}

static void bulk_client(uint16_t port, const struct options *o) {
  int fd = connect_to(port);
  char *buf = malloc((size_t)o->chunk);
  if (!buf) bench_die("malloc");
  memset(buf, 'b', (size_t)o->chunk);
  bulk_send_batch(fd, buf, bulk_batch_bytes(o, 0), o->chunk);
  double mb_per_s[MAX_BATCHES];
  for (long b = 1; b <= o->batches; ++b) {
    double t0 = bench_now_ns();
    bulk_send_batch(fd, buf, o->bytes, o->chunk);
    mb_per_s[b - 1] = (double)o->bytes / (bench_now_ns() - t0) * 1e3;
  }
  free(buf);
  close(fd);
  char extra[128];
  snprintf(extra, sizeof extra, "bytes=%ld chunk=%ld batches=%ld", o->bytes, o->chunk,
           o->batches);
  bench_print_result("tcp_bulk", "bandwidth_MBps", "MB/s",
                     bench_summarize(mb_per_s, (int)o->batches, 1), extra);
}

/* ---- connect ----------------------------------------------------------------------- */

static long connect_warmup(const struct options *o) {
  return o->warmup >= 0 ? o->warmup : o->connections / 10;
}

static void connect_server(int listener, const struct options *o) {
  long total = connect_warmup(o) + o->connections * o->batches;
  for (long i = 0; i < total; ++i) {
    int fd = accept_one(listener);
    write_all(fd, "c", 1); /* tells the client its connection was accepted */
    close(fd);
  }
}

static void connect_once(uint16_t port) {
  int fd = connect_to(port);
  char byte;
  if (!read_exact(fd, &byte, 1)) bench_die("connect: server closed before writing");
  struct linger abort_on_close = {.l_onoff = 1, .l_linger = 0};
  if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close) != 0)
    bench_die("setsockopt SO_LINGER");
  close(fd);
}

static void connect_client(uint16_t port, const struct options *o) {
  for (long i = 0; i < connect_warmup(o); ++i) connect_once(port);
  double per_s[MAX_BATCHES];
  for (long b = 0; b < o->batches; ++b) {
    double t0 = bench_now_ns();
    for (long i = 0; i < o->connections; ++i) connect_once(port);
    per_s[b] = (double)o->connections / (bench_now_ns() - t0) * 1e9;
  }
  char extra[128];
  snprintf(extra, sizeof extra, "connections=%ld batches=%ld", o->connections, o->batches);
  bench_print_result("tcp_connect", "connections_per_s", "conn/s",
                     bench_summarize(per_s, (int)o->batches, 1), extra);
}

/* ---- main -------------------------------------------------------------------------- */

static void usage(const char *prog) {
  fprintf(stderr,
          "usage: %s pingpong|bulk|connect [--iterations N] [--batches B] [--warmup N]\n"
          "          [--bytes N] [--chunk N] [--connections N] [--cpus SERVER,CLIENT]\n",
          prog);
  exit(2);
}

static void parse_options(int argc, char **argv, struct options *o) {
  if (argc < 2) usage(argv[0]);
  o->mode = argv[1];
  if (strcmp(o->mode, "pingpong") && strcmp(o->mode, "bulk") && strcmp(o->mode, "connect"))
    usage(argv[0]);
  for (int i = 2; i < argc; ++i) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!val) usage(argv[0]);
    ++i;
    if (!strcmp(arg, "--iterations")) o->iterations = bench_parse_count(arg, val);
    else if (!strcmp(arg, "--batches")) o->batches = bench_parse_count(arg, val);
    else if (!strcmp(arg, "--warmup")) o->warmup = atol(val);
    else if (!strcmp(arg, "--bytes")) o->bytes = bench_parse_count(arg, val);
    else if (!strcmp(arg, "--chunk")) o->chunk = bench_parse_count(arg, val);
    else if (!strcmp(arg, "--connections")) o->connections = bench_parse_count(arg, val);
    else if (!strcmp(arg, "--cpus")) {
      if (sscanf(val, "%d,%d", &o->server_cpu, &o->client_cpu) != 2) usage(argv[0]);
    } else usage(argv[0]);
  }
  if (o->batches > MAX_BATCHES) o->batches = MAX_BATCHES;
}

int main(int argc, char **argv) {
  struct options o = {.iterations = 1000, .warmup = -1, .batches = 10, .bytes = 1L << 30,
                      .chunk = 65536, .connections = 500, .server_cpu = -1, .client_cpu = -1};
  parse_options(argc, argv, &o);
  bench_arm_timeout(300);
  signal(SIGPIPE, SIG_IGN); /* a dead peer must show up as an error, not a silent kill */

  uint16_t port = 0;
  int listener = make_listener(&port);
  pid_t child = fork();
  if (child < 0) bench_die("fork");
  if (child == 0) {
    close(listener);
    bench_pin(o.client_cpu);
    if (!strcmp(o.mode, "pingpong")) pingpong_client(port, &o);
    else if (!strcmp(o.mode, "bulk")) bulk_client(port, &o);
    else connect_client(port, &o);
    return 0;
  }
  bench_pin(o.server_cpu);
  if (!strcmp(o.mode, "pingpong")) pingpong_server(listener);
  else if (!strcmp(o.mode, "bulk")) bulk_server(listener, &o);
  else connect_server(listener, &o);
  close(listener);

  int status = 0;
  if (waitpid(child, &status, 0) != child) bench_die("waitpid");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fprintf(stderr, "bench: client killed by signal %d\n", WTERMSIG(status));
  return 1;
}
