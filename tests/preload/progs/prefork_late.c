// A pre-fork server: a connection accepted by a process that does not hold its hello moves
// to shm by a late attach (docs/shm-rendezvous.md, "Late attach").
//
// This process listens and forks a worker (both accept on the one socket), a client, and a
// plain client (this program exec'd without the library). The plain client connects
// first, then the client: its hello waits in the record's backlog. This process accepts
// the plain connection: having no hello for it, its match reads every waiting channel and
// keeps the client's hello, whose connection the worker then accepts without it. That
// connection starts on TCP and, under the library, moves to shm: 30 request/answer
// exchanges of 1 B to 1 MiB (past the handoff threshold), each answer the request's bytes,
// checked exactly.
// Under the library (when both ends' link is shm): the client's log says its connection
// attached late and its stats moved to shm, the worker's says it sent the late hello, and
// the connection reports shm at the end.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { EXCHANGES = 30, MAX_LEN = 1 << 20 };

static size_t length_of(int i) {
  static const size_t sizes[] = {1, 100, 4096, 65536, 200000, MAX_LEN};
  return sizes[i % 6] + (size_t)i;
}

static char buf[MAX_LEN + 64], back[MAX_LEN + 64];

// Answers every request (a 4-byte length, then that many bytes) with its bytes, until the
// client closes.
static void serve(int fd, const char* who) {
  int n = 0;
  uint32_t len;
  for (;;) {
    ssize_t got = read(fd, &len, sizeof len);
    if (got == 0) break;
    CHECK(got == (ssize_t)sizeof len, "%s: a request's length (%zd)", who, got);
    CHECK(len <= sizeof buf, "%s: a request of %u bytes", who, len);
    read_exact(fd, buf, len);
    write_all(fd, buf, len);
    n++;
  }
  ok("%s: answered %d requests", who, n);
}

static void exchange(int fd, int i) {
  const uint32_t len = (uint32_t)length_of(i);
  fill_pattern(buf, len, (unsigned)i, 0);
  write_all(fd, &len, sizeof len);
  write_all(fd, buf, len);
  read_exact(fd, back, len);
  check_pattern(back, len, (unsigned)i, 0, "the answer");
}

// The plain client (exec'd without the library): connects to the port, says so on the
// descriptor `ready`, and waits for the server to close.
static int plain_client(uint16_t port, int ready) {
  const int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  SYS(connect(fd, (struct sockaddr*)&a, sizeof a));
  SYS(write(ready, "x", 1));
  char byte;
  CHECK(read(fd, &byte, 1) == 0, "the plain client: end of stream");
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "plain") == 0)
    return plain_client((uint16_t)atoi(argv[2]), atoi(argv[3]));
  prog_init("prefork_late");
  hang_guard(60, "a late attach under a pre-fork server");
  const int shm = strcmp(both_ends_link(), "shm") == 0;
  int go[2], plain_up[2], client_go[2], connected[2];
  SYS(pipe(go));
  SYS(pipe(plain_up));
  SYS(pipe(client_go));
  SYS(pipe(connected));
  const int lfd = tcp_listen(AF_INET, 0, 16);
  const uint16_t port = local_port(lfd);

  const int worker = (int)SYS(fork());
  if (worker == 0) {
    char byte;
    CHECK(read(go[0], &byte, 1) == 1, "the worker's go");
    const int fd = (int)SYS(accept(lfd, NULL, NULL));
    if (shm && fastsock_present())
      expect_log("fd=%d shm: late attach: hello sent to the connector's offer", fd);
    serve(fd, "worker");
    exit(0);
  }
  const int plain = (int)SYS(fork());
  if (plain == 0) {
    SYS(close(lfd));
    char port_arg[16], fd_arg[16];
    snprintf(port_arg, sizeof port_arg, "%u", port);
    snprintf(fd_arg, sizeof fd_arg, "%d", plain_up[1]);
    unsetenv("LD_PRELOAD");
    execl("/proc/self/exe", argv[0], "plain", port_arg, fd_arg, (char*)NULL);
    CHECK(0, "exec of the plain client");
  }
  const int client = (int)SYS(fork());
  if (client == 0) {
    SYS(close(lfd));
    char byte;
    CHECK(read(client_go[0], &byte, 1) == 1, "the client's go");
    const int fd = tcp_connect(AF_INET, port);
    SYS(write(connected[1], "c", 1));
    for (int i = 0; i < EXCHANGES; i++) exchange(fd, i);
    ok("client: %d exchanges of 1 B to 1 MiB over the worker's connection, each exact",
       EXCHANGES);
    if (shm && fastsock_present()) {
      expect_transport(fd, "shm");
      expect_log("fd=%d shm: late attach: on shm after", fd);
      expect_log("fd=%d moves to shm (late attach)", fd);
      ok("client: the worker's connection is on shm");
    }
    SYS(close(fd));
    exit(0);
  }
  char byte;
  CHECK(read(plain_up[0], &byte, 1) == 1, "the plain client's connection");
  SYS(write(client_go[1], "p", 1));
  CHECK(read(connected[0], &byte, 1) == 1, "the client's connection");
  // The plain connection: no hello, so every waiting channel is read, the client's too.
  const int fd = (int)SYS(accept(lfd, NULL, NULL));
  SYS(write(go[1], "g", 1));
  wait_child_ok(client, "client");
  SYS(close(fd));
  wait_child_ok(plain, "plain client");
  wait_child_ok(worker, "worker");
  ok("a pre-fork server: the worker's connection answered exactly");
  return 0;
}
