// stdio on a TCP socket: fdopen, fprintf/fgets, fclose. glibc's stdio reads, writes and
// closes through its internal entry points, which LD_PRELOAD cannot interpose, so the
// library never sees that close. The data must still flow (the kernel carries it), and a
// regular file that later gets the same descriptor number must not be taken for the old
// TCP connection: fastsock_transport() must report it untracked.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

int main(void) {
  prog_init("stdio_close");
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_transport(c, both_ends_link());
  FILE* f = fdopen(c, "r+");
  CHECK(f != NULL, "fdopen");
  // stdio reads and writes inside glibc, where no library can follow: the connection is
  // back on the kernel socket from here.
  expect_transport(c, "tcp");
  const char req[] = "request over stdio\n";
  CHECK(fputs(req, f) >= 0 && fflush(f) == 0, "fputs/fflush");
  char buf[128];
  read_exact(s, buf, sizeof req - 1);
  CHECK(!memcmp(buf, req, sizeof req - 1), "server got the stdio request");
  const char rep[] = "reply read with fgets\n";
  write_all(s, rep, sizeof rep - 1);
  CHECK(fgets(buf, sizeof buf, f) && !strcmp(buf, rep), "fgets got the reply");
  CHECK(fclose(f) == 0, "fclose");
  CHECK(read(s, buf, sizeof buf) == 0, "peer saw no EOF after fclose");
  ok("fdopen/fputs/fgets/fclose on a TCP socket: data intact, peer sees EOF");

  // Take descriptors until the socket's old number comes back, as a regular file.
  int held[64], nheld = 0, reused = -1;
  while (nheld < 64) {
    int fd = (int)SYS(open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
    if (fd == c) {
      reused = fd;
      break;
    }
    held[nheld++] = fd;
  }
  CHECK(reused == c, "descriptor %d never came back", c);
  char elf[4];
  CHECK(read(reused, elf, 4) == 4 && !memcmp(elf, "\177ELF", 4), "read of the reused fd");
  expect_transport(reused, NULL);
  ok("a regular file reusing descriptor %d reads normally and is not tracked", reused);
  SYS(close(reused));
  for (int i = 0; i < nheld; i++) SYS(close(held[i]));
  SYS(close(s));
  return 0;
}
