// A process that changes its uid reaches the listeners of its new uid on the link.
//
// The rendezvous names records and keeps channels by effective uid, and the library caches
// that uid (shm/shm_process.hpp: geteuid is a system call per connect otherwise); its
// setuid/seteuid/setreuid/setresuid hooks forget it. Without them, a process that dropped
// privileges would keep dialling as root and stay on TCP silently.
//
// Needs root (to change uid): exits 77 (skipped) otherwise.
//
//   this process, root: a listener        a child, uid 65534: a listener
//   connect to its own: uid 0 cached
//   setresuid(65534, 65534, 0): connect to the child's; setresuid(0, 0, 0): its own again
//   forked children: setuid(65534), setreuid(65534, 65534): connect to the child's
//   seteuid(65534) alone (the real uid stays 0): connect to the child's, then listen and
//   connect to that listener (both ends with real uid 0, effective uid 65534)
//
// The acceptor compares the uid of the hello's credentials with its own effective uid, and
// the credentials the kernel attaches by itself carry the real uid: a connector whose real
// and effective uids differ sends them explicitly with its effective uid.
//
// Finally the uid changes behind the library's back (a raw setresuid system call): the
// cached uid is stale, root's kept channel is used, and root's acceptor refuses the hello's
// credentials: that connection stays on TCP with its bytes intact. A stale cache costs
// acceleration, never the uid rule.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum { kNobody = 65534, kChildConnections = 4 };

// One connection to `port`, accepted by `listener` when it is ours (else by the child):
// 4 bytes up and back, on the link `want`.
static void exchange(uint16_t port, int listener, const char* want, unsigned seed) {
  const int fd = tcp_connect(AF_INET, port);
  const int accepted = listener >= 0 ? (int)SYS(accept(listener, NULL, NULL)) : -1;
  char out[4], in[4];
  fill_pattern(out, sizeof out, seed, 0);
  write_all(fd, out, sizeof out);
  if (accepted >= 0) {
    read_exact(accepted, in, sizeof in);
    write_all(accepted, in, sizeof in);
  }
  read_exact(fd, in, sizeof in);
  check_pattern(in, sizeof in, seed, 0, "echo");
  expect_transport(fd, want);
  ok("euid %u: connection to port %u on %s, bytes intact", (unsigned)geteuid(), port,
     fastsock_transport_of(fd) ? fastsock_transport_of(fd) : "(no library)");
  if (accepted >= 0) SYS(close(accepted));
  SYS(close(fd));
}

// The child: listens as uid 65534 and echoes kChildConnections connections.
static void serve_as_nobody(int port_pipe) {
  CHECK(syscall(SYS_setresuid, kNobody, kNobody, kNobody) == 0, "setresuid(nobody)");
  const int listener = tcp_listen(AF_INET, 0, 8);
  const uint16_t port = local_port(listener);
  CHECK(write(port_pipe, &port, sizeof port) == sizeof port, "write the port");
  for (int i = 0; i < kChildConnections; ++i) {
    const int fd = (int)SYS(accept(listener, NULL, NULL));
    char buf[4];
    read_exact(fd, buf, sizeof buf);
    write_all(fd, buf, sizeof buf);
    SYS(close(fd));
  }
  _exit(0);
}

// A forked child that changes its uid with `how` (it inherited the cached uid 0) and
// connects to the uid 65534 listener.
static void child_as_nobody(const char* how, uint16_t port, unsigned seed) {
  const pid_t pid = (pid_t)SYS(fork());
  if (pid == 0) {
    if (!strcmp(how, "setuid")) SYS(setuid(kNobody));
    else SYS(setreuid(kNobody, kNobody));
    exchange(port, -1, both_ends_link(), seed);
    _exit(0);
  }
  wait_child_ok(pid, how);
}

int main(void) {
  prog_init("setuid_dial");
  if (geteuid() != 0) {
    printf("skip: changing the uid needs root (euid %u)\n", (unsigned)geteuid());
    return 77;
  }
  hang_guard(30, "setuid_dial");
  int pipefd[2];
  SYS(pipe(pipefd));
  const pid_t child = (pid_t)SYS(fork());
  if (child == 0) serve_as_nobody(pipefd[1]);
  uint16_t nobody_port = 0;
  CHECK(read(pipefd[0], &nobody_port, sizeof nobody_port) == sizeof nobody_port,
        "the child's port");
  const int root_listener = tcp_listen(AF_INET, 0, 8);
  const uint16_t root_port = local_port(root_listener);
  const char* link = both_ends_link();

  exchange(root_port, root_listener, link, 1);  // uid 0 is cached now
  SYS(setresuid(kNobody, kNobody, 0));
  exchange(nobody_port, -1, link, 2);
  SYS(setresuid(0, 0, 0));
  exchange(root_port, root_listener, link, 3);
  child_as_nobody("setuid", nobody_port, 4);
  child_as_nobody("setreuid", nobody_port, 5);
  SYS(seteuid(kNobody));  // the effective uid alone
  exchange(nobody_port, -1, link, 7);
  const int nobody_listener = tcp_listen(AF_INET, 0, 8);
  exchange(local_port(nobody_listener), nobody_listener, link, 8);
  SYS(close(nobody_listener));
  SYS(seteuid(0));
  // Behind the library's back: it still believes uid 0 and takes root's kept channel.
  CHECK(syscall(SYS_setresuid, kNobody, kNobody, 0) == 0, "raw setresuid");
  exchange(root_port, root_listener, "tcp", 6);
  CHECK(syscall(SYS_setresuid, 0, 0, 0) == 0, "raw setresuid back");
  wait_child_ok(child, "the uid 65534 listener");
  SYS(close(root_listener));
  return 0;
}
