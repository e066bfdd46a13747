// Exec'd by fork_exec: keeps using a TCP connection it inherited as descriptor argv[1].
// argv[6], if given, is the link the connection must be on in this program.
// Reads a request of argv[2] bytes (pattern seed argv[3]), answers with argv[4] bytes
// (seed argv[3] + 100), closes the descriptor and exits 0; exits 1 on any mismatch.
// argv[5] names the exec call that started it. Under the library, the new image must also
// recognise the inherited descriptor as a tracked TCP connection (the library adopts
// inherited sockets at start-up) and report it closed with this process's byte counts.
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
  CHECK(argc == 6 || argc == 7, "usage: %s FD REQUEST_BYTES SEED REPLY_BYTES HOW [LINK]",
        argv[0]);
  prog_init("exec_child");
  int fd = atoi(argv[1]);
  size_t req = strtoul(argv[2], NULL, 10), rep = strtoul(argv[4], NULL, 10);
  unsigned seed = (unsigned)atoi(argv[3]);
  CHECK(req <= 65536 && rep <= 65536, "sizes too large");

  int type = 0;
  socklen_t len = sizeof type;
  SYS(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len));
  CHECK(type == SOCK_STREAM, "inherited fd %d is not a stream socket", fd);
  // Exec'd from a forked child, the connection was moved to TCP at the fork: the new
  // program inherits a plain TCP socket, which its library adopts and leaves on TCP. Exec'd
  // by the process that made the connection (argv[6]), it continues on its link.
  expect_transport(fd, argc == 7 ? argv[6] : "tcp");

  static char buf[65536];
  read_exact(fd, buf, req);
  check_pattern(buf, req, seed, 0, "request read after exec");
  fill_pattern(buf, rep, seed + 100, 0);
  write_all(fd, buf, rep);
  expect_closed_log(fd, rep, req);
  SYS(close(fd));
  ok("exec'd through %s: inherited fd %d carried %zu bytes in, %zu out", argv[5], fd, req,
     rep);
  return 0;
}
