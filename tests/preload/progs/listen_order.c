// A listener's rendezvous record exists before the kernel takes its first connection.
//
// A connector that finds no record connects on TCP for good. Made after the kernel's
// listen() (as it once was), a client retrying its connect while the server starts could
// look for the record too early and have its SYN accepted all the same: NPtcp's
// transmitter, in the rdma suite's ASan run, stayed on TCP that way. Here a forked child
// spins on connect() with raw system calls (no library code in between, so its SYN comes
// microseconds after the listen) and, once accepted, looks for the record's name
// (docs/shm-rendezvous.md, "The record") at once; the server reads the answer. With the
// record made after listen(), the child got there first in 1 to 30 of 30 rounds here.
// Then a listen() that fails (EADDRINUSE) after the links prepared leaves the other
// listener's record alone, and its socket can still connect.
//
// One gap is left (docs/shm-rendezvous.md, Limits): a connector's own look-up and SYN are
// two steps, and one preempted between them while the server starts stays on TCP.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum { ROUNDS = 30 };

// Whether the record of 127.0.0.1:port is published: its presence name answers a datagram
// connect (what the library's dialer does). Raw system calls only.
static int record_exists(uint16_t port) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  const int n = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1,
                         "fastsock/1/%u/127.0.0.1:%u", (unsigned)geteuid(), (unsigned)port);
  const int probe = (int)syscall(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return -1;
  const long rc = syscall(SYS_connect, probe, &addr,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n));
  syscall(SYS_close, probe);
  return rc == 0;
}

// Connects to 127.0.0.1:port with raw system calls until accepted (10 s at most), then
// answers 'y' if the record existed right after, 'n' if not. Writes a byte to `spinning`
// after its first refused attempt: the server listens only then (a fixed sleep was not
// enough on a busy host, where the child had not run yet when the server listened).
static void client(uint16_t port, int spinning) {
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (long tries = 0;; tries++) {
    const int fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0, "socket");
    if (syscall(SYS_connect, fd, &to, sizeof to) == 0) {
      const char answer = record_exists(port) == 1 ? 'y' : 'n';
      CHECK(syscall(SYS_write, fd, &answer, 1) == 1, "write");
      _exit(0);
    }
    CHECK(errno == ECONNREFUSED, "connect to port %u", port);
    syscall(SYS_close, fd);
    if (tries == 0) CHECK(syscall(SYS_write, spinning, "s", 1) == 1, "write to the server");
    CHECK(tries < 5000000, "no connection to port %u", port);
  }
}

// Two sockets bound to one port (SO_REUSEADDR allows that until one listens): the second's
// listen() fails, after its links prepared (its record could not be made: the first holds
// the name). The first listener keeps its record; once it is closed, the second socket
// listens after all, with a record of its own. Each time a connection takes the link.
static void connect_once(int listener, const struct sockaddr_in* at) {
  const int client = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
  SYS(connect(client, (const struct sockaddr*)at, sizeof *at));
  const int fd = (int)SYS(accept(listener, NULL, NULL));
  expect_transport(client, both_ends_link());
  expect_transport(fd, both_ends_link());
  char b = 'x';
  write_all(client, &b, 1);
  read_exact(fd, &b, 1);
  SYS(close(fd));
  SYS(close(client));
}

static void failed_listen(void) {
  const int one = 1;
  int fds[2];
  struct sockaddr_in at = {.sin_family = AF_INET};
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < 2; i++) {
    fds[i] = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    SYS(setsockopt(fds[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
    SYS(bind(fds[i], (struct sockaddr*)&at, sizeof at));
    at.sin_port = htons(local_port(fds[0]));
  }
  SYS(listen(fds[0], 4));
  CHECK(listen(fds[1], 4) == -1 && errno == EADDRINUSE, "a second listen on port %u",
        ntohs(at.sin_port));
  const int link = fastsock_present() ? 1 : 0;
  CHECK(record_exists(ntohs(at.sin_port)) == link,
        "the first listener's record after the second's failed listen");
  connect_once(fds[0], &at);
  SYS(close(fds[0]));
  SYS(listen(fds[1], 4));
  connect_once(fds[1], &at);
  SYS(close(fds[1]));
}

int main(void) {
  prog_init("listen_order");
  hang_guard(60, "a client retrying its connects");
  int missing = 0;
  for (int round = 0; round < ROUNDS; round++) {
    const int lfd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    struct sockaddr_in at = {.sin_family = AF_INET};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SYS(bind(lfd, (struct sockaddr*)&at, sizeof at));
    const uint16_t port = local_port(lfd);
    int spinning[2];
    SYS(pipe(spinning));
    const pid_t pid = (pid_t)SYS(fork());
    if (pid == 0) client(port, spinning[1]);
    char s;
    CHECK(read(spinning[0], &s, 1) == 1, "round %d: the client never tried", round);
    SYS(close(spinning[0]));
    SYS(close(spinning[1]));
    SYS(listen(lfd, 4));  // the child spins on refused connects meanwhile
    const int fd = (int)SYS(accept(lfd, NULL, NULL));
    char answer;
    read_exact(fd, &answer, 1);
    if (answer != 'y') missing++;
    SYS(close(fd));
    SYS(close(lfd));
    int status;
    SYS(waitpid(pid, &status, 0));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d: client exit status %d", round,
          status);
  }
  failed_listen();
  if (!fastsock_present()) {
    CHECK(missing == ROUNDS, "a record without the library?");
    ok("%d rounds: no record without the library", ROUNDS);
    return 0;
  }
  CHECK(missing == 0, "in %d of %d rounds the kernel accepted a connection before the "
        "listener's record existed", missing, ROUNDS);
  ok("%d rounds: the record existed whenever the kernel accepted a connection; a failed "
     "listen left the other listener's record", ROUNDS);
  return 0;
}
