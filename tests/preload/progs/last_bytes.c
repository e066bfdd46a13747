// The last bytes a peer writes just before close() are read before the end of stream.
//
// A forked server accepts CYCLES connections; on each it writes a short reply and closes at
// once. The client reads until the end of stream and must get the whole reply first. Half
// of the cycles the client sends a request first (the reply then comes on a connection
// whose shm link is up in both directions), half the server replies right after accept (the
// reply may come while the client still waits for the link); in each half the client reads
// alternately with blocking reads and by spinning on MSG_DONTWAIT reads.
//
// Under the library the reply travels on the ring and the close shows twice: a FIN on the
// ring and the kernel's FIN on TCP, which is also how a peer that died shows. A reader that
// found the ring empty, then the TCP FIN, took the end of stream as the peer's death and
// lost the reply when the peer had written it and closed in between (bench_tcp's connect
// test: "server closed before writing", about once in 500,000 connections).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { CYCLES = 4000, REPLY_MAX = 13 };

static size_t reply_len(int cycle) { return 1 + (size_t)cycle % REPLY_MAX; }
static int request_first(int cycle) { return cycle < CYCLES / 2; }

static _Noreturn void server(int lfd) {
  char buf[REPLY_MAX];
  for (int i = 0; i < CYCLES; i++) {
    const int fd = (int)SYS(accept(lfd, NULL, NULL));
    if (request_first(i)) read_exact(fd, buf, 1);
    fill_pattern(buf, reply_len(i), (unsigned)i, 0);
    write_all(fd, buf, reply_len(i));
    SYS(close(fd));
  }
  exit(0);
}

// Reads to the end of stream with MSG_DONTWAIT reads, spinning.
static size_t spin_to_eof(int fd, char* buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    const ssize_t n = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
    if (n == 0) return got;
    if (n < 0) {
      CHECK(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
      continue;
    }
    got += (size_t)n;
    CHECK(got < cap, "more bytes than the server wrote");
  }
}

int main(void) {
  prog_init("last_bytes");
  hang_guard(100, "last bytes before close");
  const int lfd = tcp_listen(AF_INET, 0, 64);
  const uint16_t port = local_port(lfd);
  const int pid = (int)SYS(fork());
  if (pid == 0) server(lfd);
  SYS(close(lfd));
  char buf[REPLY_MAX + 1];
  for (int i = 0; i < CYCLES; i++) {
    const int fd = tcp_connect(AF_INET, port);
    if (i == 0 || i == CYCLES - 1) expect_transport(fd, both_ends_link());
    if (request_first(i)) write_all(fd, "?", 1);
    const size_t got = i % 2 ? spin_to_eof(fd, buf, sizeof buf) : read_to_eof(fd, buf, sizeof buf);
    CHECK(got == reply_len(i), "cycle %d: %zu of the %zu bytes written before close() arrived "
          "before the end of stream", i, got, reply_len(i));
    check_pattern(buf, got, (unsigned)i, 0, "the reply");
    SYS(close(fd));
  }
  expect_count(CYCLES, "fd=|client |on %s", both_ends_link());
  wait_child_ok(pid, "the server");
  ok("%d connections: every reply written just before close() was read before the end of "
     "stream", CYCLES);
  return 0;
}
