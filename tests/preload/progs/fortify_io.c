// Built with -O2 -D_FORTIFY_SOURCE=2 (see meson.build) so that glibc's headers turn read,
// recv, recvfrom, poll and ppoll into __read_chk, __recv_chk, __recvfrom_chk, __poll_chk
// and __ppoll_chk: the buffer sizes are known to the compiler, the lengths are not. The
// test script checks with nm that the binary really references the __*_chk names, and the
// received= counts in the log prove the library saw the bytes that went through them
// (glibc's __recv_chk calls its internal recv, which an LD_PRELOAD recv hook never sees).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#if !defined(_FORTIFY_SOURCE) || _FORTIFY_SOURCE < 2 || !defined(__OPTIMIZE__)
#error "fortify_io.c must be built with -O2 -D_FORTIFY_SOURCE=2"
#endif

// Lengths are read from volatile objects so the compiler can neither prove them safe nor
// unsafe: it must call the checked variants. (A visible range check would let it prove the
// call safe and emit the plain function.)
static volatile size_t g_chunk = 1000;
static volatile nfds_t g_nfds = 2;
enum { kBuf = 4096 };

static void wait_readable(int fd, int use_ppoll) {
  struct pollfd fds[4];
  memset(fds, 0, sizeof fds);
  for (int i = 0; i < 4; i++) fds[i] = (struct pollfd){.fd = fd, .events = POLLIN};
  int n;
  if (use_ppoll) {
    struct timespec ts = {10, 0};
    n = ppoll(fds, g_nfds, &ts, NULL);  // __ppoll_chk
  } else {
    n = poll(fds, g_nfds, 10000);       // __poll_chk
  }
  CHECK(n == (int)g_nfds && (fds[0].revents & POLLIN), "%s: %d ready of %lu",
        use_ppoll ? "ppoll" : "poll", n, (unsigned long)g_nfds);
}

// Receives one chunk with `how` (0 read, 1 recv, 2 recvfrom), piece by piece.
static size_t recv_chunk(int fd, int how, unsigned seed, size_t offset) {
  size_t got = 0;
  while (got < g_chunk) {
    char in[kBuf];
    ssize_t n;
    if (how == 0) {
      n = read(fd, in, g_chunk - got);                // __read_chk
    } else if (how == 1) {
      n = recv(fd, in, g_chunk - got, 0);             // __recv_chk
    } else {
      struct sockaddr_storage from;
      socklen_t fromlen = sizeof from;
      n = recvfrom(fd, in, g_chunk - got, 0, (struct sockaddr*)&from, &fromlen);
    }
    CHECK(n > 0, "%s returned %zd", how == 0 ? "read" : how == 1 ? "recv" : "recvfrom", n);
    check_pattern(in, (size_t)n, seed, offset + got, "checked-variant data");
    got += (size_t)n;
  }
  return got;
}

int main(int argc, char** argv) {
  prog_init("fortify_io");
  if (argc > 1) g_chunk = strtoul(argv[1], NULL, 10);
  if (argc > 2) g_nfds = strtoul(argv[2], NULL, 10);
  CHECK(g_chunk > 0 && g_chunk <= kBuf && g_nfds >= 1 && g_nfds <= 4,
        "usage: %s [chunk<=%d] [nfds<=4]", argv[0], kBuf);

  int client, server;
  tcp_pair(AF_INET, &client, &server);
  expect_client_log(client);
  expect_server_log(server);

  char out[kBuf];
  size_t server_received = 0;
  for (int how = 0; how < 3; how++) {
    fill_pattern(out, g_chunk, 1, server_received);
    write_all(client, out, g_chunk);
    if (how < 2) wait_readable(server, how);
    server_received += recv_chunk(server, how, 1, server_received);
  }
  ok("read/recv/recvfrom (__read_chk/__recv_chk/__recvfrom_chk) got %zu bytes intact, "
     "after poll (__poll_chk) and ppoll (__ppoll_chk)", server_received);

  // The reply comes back through __recv_chk with MSG_WAITALL.
  fill_pattern(out, g_chunk, 2, 0);
  write_all(server, out, g_chunk);
  char in[kBuf];
  ssize_t n = recv(client, in, g_chunk, MSG_WAITALL);
  CHECK(n == (ssize_t)g_chunk, "recv MSG_WAITALL (__recv_chk) returned %zd", n);
  check_pattern(in, g_chunk, 2, 0, "reply");
  ok("recv(MSG_WAITALL) (__recv_chk) %zd bytes intact", n);

  expect_closed_log(client, server_received, (size_t)n);
  expect_closed_log(server, g_chunk, server_received);
  SYS(close(client));
  SYS(close(server));
  return 0;
}
