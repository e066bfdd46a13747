// A process under the library leaves nothing in /dev/shm however it exits normally:
// exit(3), _exit(2) (what forked children and many daemons call) and _Exit(3), each with a
// connection still open. Each child makes a connection on the shm link, so it publishes its
// stats file, checks that the file is there, and ends with that connection open; the
// parent reaps it and checks that /dev/shm/fastsock-stats.<child> is gone. (SIGKILL cannot
// be handled by any library: tests/preload/shm_leaks.sh checks that `fastsock stat` removes
// those files.) Run as root, it also has children that drop to `nobody` (setuid, as nginx's
// workers do, and seteuid) before exit(): /dev/shm is sticky, so the file they published
// as root must have followed them to `nobody` for them to remove it.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum way { EXIT, UNDERSCORE_EXIT, UNDERSCORE_CAPITAL_EXIT, SETUID_EXIT, SETEUID_EXIT, WAYS };
static const char* const way_names[] = {"exit()", "_exit()", "_Exit()",
                                        "setuid(nobody) and exit()", "seteuid(nobody) and exit()"};
static const uid_t kNobody = 65534;

int main(void) {
  prog_init("exit_paths");
  for (int w = EXIT; w < WAYS; w++) {
    if ((w == SETUID_EXIT || w == SETEUID_EXIT) && geteuid() != 0) {
      printf("exit_paths: %s not checked: not run as root\n", way_names[w]);
      continue;
    }
    for (int child_accepts = 0; child_accepts < 2; child_accepts++) {
      int child;
      int fd = fork_connected(child_accepts, &child);
      char path[64];
      const char* stats = stats_file_of(child == 0 ? (int)getpid() : child, path, sizeof path);
      if (child == 0) {
        CHECK(!*stats || access(stats, F_OK) == 0, "the child has no stats file %s", stats);
        char b;
        CHECK(read(fd, &b, 1) == 1, "the parent's go");
        switch (w) {
          case EXIT: exit(0);
          case UNDERSCORE_EXIT: _exit(0);
          case SETUID_EXIT: SYS(setuid(kNobody)); exit(0);
          case SETEUID_EXIT: SYS(seteuid(kNobody)); exit(0);
          default: _Exit(0);
        }
      }
      write_all(fd, "g", 1);
      wait_child_ok(child, way_names[w]);
      CHECK(!*stats || access(stats, F_OK) != 0, "a child that ended with %s (connection "
            "open) left %s", way_names[w], stats);
      SYS(close(fd));
      ok("a %s child that ended with %s and a connection open left no stats file",
         child_accepts ? "accepting" : "connecting", way_names[w]);
    }
  }
  return 0;
}
