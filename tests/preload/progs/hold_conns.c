// hold_conns N exit|wait: two processes (this one and a forked child) with N connections
// open between them, then an end without closing them.
//   exit  both return from main (exit(3): atexit handlers and the library's destructors run)
//         with every connection still open;
//   wait  both print "ready" and sleep until killed (the caller sends SIGKILL).
// Prints "pids: PARENT CHILD" so that the caller can look for what the processes left
// behind (tests/preload/shm_leaks.sh).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char** argv) {
  prog_init("hold_conns");
  CHECK(argc == 3 && (strcmp(argv[2], "exit") == 0 || strcmp(argv[2], "wait") == 0),
        "usage: hold_conns N exit|wait");
  const int n = atoi(argv[1]);
  CHECK(n > 0 && n <= 1000, "N = %d", n);
  raise_nofile(6 * n + 64);
  int lfd = tcp_listen(AF_INET, 0, n);
  const uint16_t port = local_port(lfd);
  int p[2];
  SYS(pipe(p));
  const int pid = (int)SYS(fork());
  char byte = 'x';
  for (int i = 0; i < n; i++) {
    int fd = pid == 0 ? tcp_connect(AF_INET, port) : (int)SYS(accept(lfd, NULL, NULL));
    write_all(fd, &byte, 1);
    read_exact(fd, &byte, 1);
    if (i == 0) expect_transport(fd, both_ends_link());
  }
  ok("%s: %d connections open", pid == 0 ? "child" : "parent", n);
  if (pid == 0) {
    SYS(close(p[0]));
    if (strcmp(argv[2], "wait") == 0) {
      write_all(p[1], "c", 1);  // the parent says "ready" only when both are
      for (;;) pause();
    }
    exit(0);  // connections and the listener still open
  }
  SYS(close(p[1]));
  if (strcmp(argv[2], "wait") == 0) {
    read_exact(p[0], &byte, 1);
    printf("pids: %d %d\nready\n", (int)getpid(), pid);
    for (;;) pause();
  }
  printf("pids: %d %d\n", (int)getpid(), pid);
  wait_child_ok(pid, "the child");
  return 0;  // connections and the listener still open
}
