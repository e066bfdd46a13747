// Helpers shared by the preload test programs (see common.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char* g_name = "prog";

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
  int saved = errno;
  fprintf(stdout, "FAIL[%s pid %d] %s:%d: %s: ", g_name, (int)getpid(), file, line, cond);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fprintf(stdout, " (errno %d %s)\n", saved, strerror(saved));
  fflush(stdout);
  _exit(1);
}

long sys_checked(long ret, const char* file, int line, const char* what) {
  if (ret == -1) check_failed(file, line, what, "call failed");
  return ret;
}

void ok(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("ok: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

void note_skip(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("skip: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

typedef const char* (*transport_fn)(int);

// ISO C has no cast from void* to a function pointer; copying the bits is the portable way.
static void* api_symbol(const char* name) { return dlsym(RTLD_DEFAULT, name); }

static transport_fn api_transport(void) {
  transport_fn fn = NULL;
  void* sym = api_symbol("fastsock_transport");
  memcpy(&fn, &sym, sizeof fn);
  return fn;
}

int fastsock_present(void) { return api_transport() != NULL; }

void prog_init(const char* name) {
  g_name = name;
  setvbuf(stdout, NULL, _IOLBF, 0);
  typedef const char* (*version_fn)(void);
  version_fn version = NULL;
  void* sym = api_symbol("fastsock_version");
  memcpy(&version, &sym, sizeof version);
  if (fastsock_present() && version)
    printf("fastsock: present (version %s)\n", version());
  else
    printf("fastsock: absent\n");
}

const char* both_ends_link(void) {
  const char* link = getenv("FASTSOCK_TEST_LINK");
  return link && *link ? link : "shm";
}

const char* fastsock_transport_of(int fd) {
  transport_fn fn = api_transport();
  return fn ? fn(fd) : NULL;
}

void expect_transport(int fd, const char* want) {
  transport_fn fn = api_transport();
  if (!fn) return;
  errno = 0;
  const char* got = fn(fd);
  // A verbs connection is reported on verbs once its RDMA connection is up, a little after
  // connect()/accept(): until then (10 s at most) it is on tcp. (Not through the log's
  // "established" line: that names the connection's first descriptor, `fd` may be a dup.)
  const time_t give_up = time(NULL) + 10;
  while (want && strcmp(want, "verbs") == 0 && got && strcmp(got, "tcp") == 0 &&
         time(NULL) < give_up) {
    usleep(10 * 1000);
    errno = 0;
    got = fn(fd);
  }
  if (want) {
    // The vendor link carries a connection only once its handshake on TCP is done.
    const int vendor_starting = strcmp(want, "vendor") == 0 && got && strcmp(got, "tcp") == 0;
    CHECK(got && (strcmp(got, want) == 0 || vendor_starting),
          "fastsock_transport(fd=%d) = %s, want %s", fd, got ? got : "NULL", want);
    ok("fastsock_transport(fd=%d) = %s", fd, got);
  } else {
    CHECK(got == NULL, "fastsock_transport(fd=%d) = %s, want NULL (untracked)", fd, got);
    CHECK(errno != 0, "fastsock_transport(fd=%d) returned NULL without setting errno", fd);
    ok("fastsock_transport(fd=%d) = NULL (untracked, errno %d)", fd, errno);
  }
}

static void print_expectation(const char* tag, const char* fmt, va_list ap) {
  if (!fastsock_present()) return;
  char text[512];
  vsnprintf(text, sizeof text, fmt, ap);
  printf("%s: fastsock[%d] debug: %s\n", tag, (int)getpid(), text);
}

void expect_log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  print_expectation("expect-log", fmt, ap);
  va_end(ap);
}

void wait_for_log(int timeout_s, const char* fmt, ...) {
  if (!fastsock_present()) return;
  const char* path = getenv("FASTSOCK_LOG_FILE");
  CHECK(path && *path, "wait_for_log: FASTSOCK_LOG_FILE is not set");
  char text[256], want[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  snprintf(want, sizeof want, "fastsock[%d] debug: %s", (int)getpid(), text);
  const time_t give_up = time(NULL) + timeout_s;
  for (;;) {
    FILE* f = fopen(path, "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, want) != NULL;
    if (f) fclose(f);
    if (found) return;
    CHECK(time(NULL) < give_up, "no log line \"%s\" within %d s", want, timeout_s);
    usleep(10 * 1000);
  }
}

void wait_for_link_up(int fd) {
  const char* link = both_ends_link();
  if (strcmp(link, "verbs") == 0)
    wait_for_log(10, "fd=%d verbs: RDMA connection established", fd);
  else if (strcmp(link, "vendor") == 0)
    wait_for_log(10, "fd=%d vendor: linked through", fd);
}

void expect_no_log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  print_expectation("expect-nolog", fmt, ap);
  va_end(ap);
}

void expect_count(int n, const char* fmt, ...) {
  if (!fastsock_present()) return;
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  printf("expect-count: %d fastsock[%d] debug: %s\n", n, (int)getpid(), text);
}

// The link a connection's first log line names: the vendor and verbs links start on TCP
// while their own connection is made (a later line says "carried by vendor"/"by verbs").
static const char* opening_link(void) {
  const char* link = both_ends_link();
  if (strcmp(link, "vendor") == 0) return "tcp (vendor: handshake under way)";
  if (strcmp(link, "verbs") == 0) return "tcp (verbs: RDMA connection under way)";
  return link;
}

void expect_client_log(int fd) {
  char l[80], p[80];
  expect_log("fd=%d client %s -> %s on %s", fd, local_str(fd, l, sizeof l),
             peer_str(fd, p, sizeof p), opening_link());
}

void expect_server_log(int fd) {
  char l[80], p[80];
  expect_log("fd=%d server %s <- %s on %s", fd, local_str(fd, l, sizeof l),
             peer_str(fd, p, sizeof p), opening_link());
}

// The closed line names the connection by a descriptor number, which need not be the one
// closed last (dup'ed descriptors share the connection), so only the pid, the event and
// the exact counts (anchored at the end of the line) are expected. `fd` is not printed.
void expect_closed_log(int fd, size_t sent, size_t received) {
  (void)fd;
  expect_log("fd=|closed sent=%zu received=%zu$", sent, received);
}

void expect_no_fd_log(void) { expect_no_log("fd="); }

const char* addr_str(const struct sockaddr_storage* ss, char* buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in* in = (const struct sockaddr_in*)ss;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6* in6 = (const struct sockaddr_in6*)ss;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
  } else {
    snprintf(buf, len, "family-%d", ss->ss_family);
  }
  return buf;
}

const char* local_str(int fd, char* buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  SYS(getsockname(fd, (struct sockaddr*)&ss, &sl));
  return addr_str(&ss, buf, len);
}

const char* peer_str(int fd, char* buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  SYS(getpeername(fd, (struct sockaddr*)&ss, &sl));
  return addr_str(&ss, buf, len);
}

uint16_t local_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  SYS(getsockname(fd, (struct sockaddr*)&ss, &sl));
  return ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in*)&ss)->sin_port)
                                 : ntohs(((struct sockaddr_in6*)&ss)->sin6_port);
}

// The address the programs listen on and connect to: loopback, or for IPv4 the address in
// FASTSOCK_TEST_ADDR (the RDMA tests' VM: rsocket cannot carry loopback connections).
static socklen_t loopback(int family, uint16_t port, struct sockaddr_storage* ss) {
  memset(ss, 0, sizeof *ss);
  const char* test_addr = getenv("FASTSOCK_TEST_ADDR");
  if (family == AF_INET6) {
    struct sockaddr_in6* in6 = (struct sockaddr_in6*)ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    in6->sin6_port = htons(port);
    return sizeof *in6;
  }
  struct sockaddr_in* in = (struct sockaddr_in*)ss;
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (test_addr && *test_addr)
    CHECK(inet_pton(AF_INET, test_addr, &in->sin_addr) == 1,
          "FASTSOCK_TEST_ADDR=%s is not an IPv4 address", test_addr);
  in->sin_port = htons(port);
  return sizeof *in;
}

int tcp_listen(int family, uint16_t port, int backlog) {
  int fd = (int)SYS(socket(family, SOCK_STREAM, 0));
  int one = 1;
  SYS(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  struct sockaddr_storage ss;
  socklen_t sl = loopback(family, port, &ss);
  SYS(bind(fd, (struct sockaddr*)&ss, sl));
  SYS(listen(fd, backlog));
  return fd;
}

int tcp_connect(int family, uint16_t port) {
  int fd = (int)SYS(socket(family, SOCK_STREAM, 0));
  struct sockaddr_storage ss;
  socklen_t sl = loopback(family, port, &ss);
  SYS(connect(fd, (struct sockaddr*)&ss, sl));
  return fd;
}

void tcp_pair(int family, int* client, int* server) {
  int lfd = tcp_listen(family, 0, 4);
  *client = tcp_connect(family, local_port(lfd));
  *server = (int)SYS(accept(lfd, NULL, NULL));
  SYS(close(lfd));
  // Over verbs the link comes up a little after accept(): a check made before would test
  // TCP. (Over vendor the programs also exercise a connection used while its handshake is
  // under way, as they always did: a program that needs the link waits itself.)
  if (strcmp(both_ends_link(), "verbs") == 0) {
    wait_for_link_up(*client);
    wait_for_link_up(*server);
  }
}

int ipv6_loopback_available(void) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_storage ss;
  socklen_t sl = loopback(AF_INET6, 0, &ss);
  int ok_bind = bind(fd, (struct sockaddr*)&ss, sl) == 0;
  close(fd);
  return ok_bind;
}

void write_all(int fd, const void* buf, size_t len) {
  const char* p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n > 0, "write(fd=%d, %zu) returned %zd", fd, len, n);
    p += n;
    len -= (size_t)n;
  }
}

void read_exact(int fd, void* buf, size_t len) {
  char* p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n > 0, "read(fd=%d, %zu) returned %zd (0 = early EOF)", fd, len, n);
    p += n;
    len -= (size_t)n;
  }
}

void byte_both_ways(int client, int server, int i) {
  char b = (char)i, got = 0;
  write_all(client, &b, 1);
  read_exact(server, &got, 1);
  CHECK(got == b, "pair %d: byte", i);
  write_all(server, &b, 1);
  read_exact(client, &got, 1);
  CHECK(got == b, "pair %d: byte back", i);
}

size_t read_to_eof(int fd, void* buf, size_t cap) {
  char* p = buf;
  size_t total = 0;
  for (;;) {
    char spare;
    ssize_t n = read(fd, total < cap ? p + total : &spare, total < cap ? cap - total : 1);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n >= 0, "read(fd=%d) failed", fd);
    if (n == 0) return total;
    CHECK(total < cap, "read(fd=%d): more than %zu bytes before EOF", fd, cap);
    total += (size_t)n;
  }
}

static unsigned char pattern_byte(unsigned seed, size_t i) {
  return (unsigned char)((i * 131u + seed * 7u + (i >> 8) * 17u) & 0xff);
}

void fill_pattern(void* buf, size_t len, unsigned seed, size_t offset) {
  unsigned char* p = buf;
  for (size_t i = 0; i < len; i++) p[i] = pattern_byte(seed, offset + i);
}

void check_pattern(const void* buf, size_t len, unsigned seed, size_t offset, const char* what) {
  const unsigned char* p = buf;
  for (size_t i = 0; i < len; i++)
    CHECK(p[i] == pattern_byte(seed, offset + i), "%s: byte %zu is %u, want %u", what,
          offset + i, p[i], pattern_byte(seed, offset + i));
}

void wait_child_ok(int pid, const char* what) {
  int status = 0;
  int r;
  do r = waitpid(pid, &status, 0);
  while (r < 0 && errno == EINTR);
  CHECK(r == pid, "waitpid(%d) for %s", pid, what);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s (pid %d) ended with status 0x%x",
        what, pid, status);
}

void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// Descriptors of this process whose target starts with `prefix` (all with NULL), not
// counting the directory's own.
static int fds_matching(const char* prefix) {
  DIR* d = opendir("/proc/self/fd");
  CHECK(d != NULL, "opendir(/proc/self/fd)");
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) continue;
    if (prefix) {
      char path[300], target[256];
      snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      const ssize_t len = readlink(path, target, sizeof target - 1);
      if (len <= 0) continue;
      target[len] = '\0';
      if (strncmp(target, prefix, strlen(prefix)) != 0) continue;
    }
    n++;
  }
  closedir(d);
  return n;
}

int count_fds(void) { return fds_matching(NULL); }

int count_rendezvous_channels(void) {
  // The inodes of this network namespace's Unix SOCK_SEQPACKET sockets (type 0005)...
  FILE* f = fopen("/proc/net/unix", "r");
  CHECK(f != NULL, "fopen(/proc/net/unix)");
  static unsigned long inodes[65536];
  size_t count = 0;
  char line[512];
  while (fgets(line, sizeof line, f) && count < sizeof inodes / sizeof inodes[0]) {
    unsigned type = 0;
    unsigned long inode = 0;
    if (sscanf(line, "%*s %*s %*s %*s %x %*s %lu", &type, &inode) == 2 && type == 5)
      inodes[count++] = inode;
  }
  fclose(f);
  // ...that this process holds.
  DIR* d = opendir("/proc/self/fd");
  CHECK(d != NULL, "opendir(/proc/self/fd)");
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    unsigned long inode = 0;
    if (sscanf(target, "socket:[%lu]", &inode) != 1) continue;
    for (size_t i = 0; i < count; i++) {
      if (inodes[i] == inode) {
        n++;
        break;
      }
    }
  }
  closedir(d);
  return n;
}

int count_connection_fds(void) { return count_fds() - count_rendezvous_channels(); }

long rss_kib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  CHECK(f != NULL, "fopen(/proc/self/statm)");
  long size = 0, resident = 0;
  CHECK(fscanf(f, "%ld %ld", &size, &resident) == 2, "parse /proc/self/statm");
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int mappings_named(const char* name) {
  FILE* f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL, "fopen(/proc/self/maps)");
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, name)) n++;
  fclose(f);
  return n;
}

int shm_segment_mappings(void) { return mappings_named("/memfd:fastsock-shm"); }

int pooled_segment_mappings(void) { return mappings_named("/memfd:fastsock-shm-pool "); }

// Descriptors that are a segment's memfd kept open for exec (shm/shm_conn.hpp
// keep_memfd_for): "pool" for pooled segments' (their slot keeps it), else a connection's.
int count_memfds(int pooled) {
  return fds_matching(pooled ? "/memfd:fastsock-shm-pool " : "/memfd:fastsock-shm ");
}

int count_unpooled_fds(void) {
  return count_connection_fds() - 2 * pooled_segment_mappings() - count_memfds(1);
}

int unpooled_segment_mappings(void) { return shm_segment_mappings() - pooled_segment_mappings(); }

void check_pool_bound(const char* who) {
  const int pooled = pooled_segment_mappings(), channels = count_rendezvous_channels();
  CHECK(pooled <= 16 * channels, "%s: %d pooled segments for %d rendezvous channels (bound 16 "
        "each)", who, pooled, channels);
}

long raise_nofile(long want) {
  struct rlimit rl;
  SYS(getrlimit(RLIMIT_NOFILE, &rl));
  if (rl.rlim_cur < (rlim_t)want) {
    rl.rlim_cur = rl.rlim_max < (rlim_t)want ? rl.rlim_max : (rlim_t)want;
    SYS(setrlimit(RLIMIT_NOFILE, &rl));
  }
  return (long)rl.rlim_cur;
}

static char g_hang_what[160];

static void hang_alarm(int sig) {
  (void)sig;
  char msg[256];
  int n = snprintf(msg, sizeof msg, "FAIL[%s pid %d] hang: %s\n", g_name, (int)getpid(),
                   g_hang_what);
  if (n > 0) (void)!write(1, msg, (size_t)n);
  _exit(1);
}

void hang_guard(unsigned secs, const char* what) {
  snprintf(g_hang_what, sizeof g_hang_what, "%s", what);
  signal(SIGALRM, hang_alarm);
  alarm(secs);
}

int fork_connected(int child_accepts, int* child) {
  int p[2];
  SYS(pipe(p));
  int pid = (int)SYS(fork());
  if (pid == 0) SYS(prctl(PR_SET_PDEATHSIG, SIGKILL));
  const int i_accept = pid == 0 ? child_accepts : !child_accepts;
  int fd;
  char byte;
  if (i_accept) {
    int lfd = tcp_listen(AF_INET, 0, 4);
    uint16_t port = local_port(lfd);
    write_all(p[1], &port, sizeof port);
    fd = (int)SYS(accept(lfd, NULL, NULL));
    SYS(close(lfd));
    read_exact(fd, &byte, 1);
    write_all(fd, "r", 1);
    if (pid != 0) expect_server_log(fd);
  } else {
    uint16_t port;
    read_exact(p[0], &port, sizeof port);
    fd = tcp_connect(AF_INET, port);
    write_all(fd, "h", 1);
    read_exact(fd, &byte, 1);
    if (pid != 0) expect_client_log(fd);
  }
  SYS(close(p[0]));
  SYS(close(p[1]));
  expect_transport(fd, both_ends_link());
  *child = pid;
  return fd;
}

const char* stats_file_of(int pid, char* buf, size_t len) {
  if (!fastsock_present()) return "";
  snprintf(buf, len, "/dev/shm/fastsock-stats.%d", pid);
  return buf;
}

void remove_killed_child_stats(int pid) {
  char path[64];
  if (*stats_file_of(pid, path, sizeof path)) (void)unlink(path);
}

void sibling_program(const char* name, char* out, size_t len) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0, "readlink /proc/self/exe");
  self[n] = '\0';
  char* dir = dirname(self);
  snprintf(out, len, "%s/%s", dir, name);
  CHECK(access(out, X_OK) == 0, "no executable %s", out);
  const char* old_path = getenv("PATH");
  char path_env[8192];
  snprintf(path_env, sizeof path_env, "%s:%s", dir, old_path ? old_path : "/usr/bin:/bin");
  SYS(setenv("PATH", path_env, 1));
}
