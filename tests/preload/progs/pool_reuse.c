// Pooled segments between two processes (shm/shm_pool.hpp): CONNS sequential connections
// from this process to a forked echo server, each with a stream of its own (length and
// bytes depend on the connection's index) checked exactly both ways, so that a reused
// segment showing a byte of an earlier connection fails. Under the library, the log must
// show every connection on a pooled segment (none "of its own") and at least
// CONNS - 16 of them reusing one (a channel's pool has 16 slots: at most 16 are new); each
// stays on shm (a refused reuse would put it on TCP). At the end both processes hold their
// pooled segments within the bound, and the client checks that the server's death frees
// its pool: its next dial there finds the channel dead, and no segment stays mapped.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum { CONNS = 40, MAX_NEW = 16, MAX_LEN = 9000 };

static size_t length_of(int i) { return 1 + (size_t)(i * 211) % MAX_LEN; }

static _Noreturn void echo_server(int lfd) {
  static char buf[MAX_LEN];
  for (int i = 0; i < CONNS; i++) {
    int fd = (int)SYS(accept(lfd, NULL, NULL));
    const size_t len = length_of(i);
    read_exact(fd, buf, len);
    check_pattern(buf, len, (unsigned)i, 0, "the request");
    write_all(fd, buf, len);
    CHECK(read(fd, buf, 1) == 0, "connection %d: no end of stream after the echo", i);
    SYS(close(fd));
  }
  check_pool_bound("server");
  ok("server: %d connections, each with its exact bytes; %d pooled segments", CONNS,
     pooled_segment_mappings());
  pause();  // killed by the client
  exit(0);
}

int main(void) {
  prog_init("pool_reuse");
  hang_guard(60, "sequential connections on pooled segments");
  int lfd = tcp_listen(AF_INET, 0, 16);
  const uint16_t port = local_port(lfd);
  const int pid = (int)SYS(fork());
  if (pid == 0) echo_server(lfd);
  SYS(close(lfd));
  static char out[MAX_LEN], in[MAX_LEN];
  for (int i = 0; i < CONNS; i++) {
    int fd = tcp_connect(AF_INET, port);
    const size_t len = length_of(i);
    fill_pattern(out, len, (unsigned)i, 0);
    write_all(fd, out, len);
    read_exact(fd, in, len);
    check_pattern(in, len, (unsigned)i, 0, "the echo");
    expect_transport(fd, both_ends_link());
    SYS(close(fd));
  }
  ok("client: %d connections, each with its exact bytes", CONNS);
  if (fastsock_present() && strcmp(both_ends_link(), "shm") == 0) {
    expect_count(0, "fd=|shm: segment of its own");
    for (int i = 0; i < CONNS - MAX_NEW; i++)
      expect_log("fd=|shm: segment reused from the channel's pool");
    check_pool_bound("client");
    CHECK(pooled_segment_mappings() >= 1, "client: no pooled segment after %d connections",
          CONNS);
  }
  SYS(kill(pid, SIGKILL));
  int status = 0;
  SYS(waitpid(pid, &status, 0));
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the server was not killed");
  remove_killed_child_stats(pid);
  // The next connection there: its dial finds the dead channel and closes it with its pool.
  int fd = SYS(socket(AF_INET, SOCK_STREAM, 0));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(connect(fd, (struct sockaddr*)&a, sizeof a) != 0, "a connect to the dead server worked");
  SYS(close(fd));
  CHECK(shm_segment_mappings() == 0, "client: %d shm segments mapped after the server died",
        shm_segment_mappings());
  ok("client: the server's death freed the pool (no segment mapped)");
  return 0;
}
