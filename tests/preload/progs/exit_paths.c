// A process under the library leaves nothing in /dev/shm however it exits normally:
// exit(3), _exit(2) (what forked children and many daemons call) and _Exit(3), each with a
// connection still open. Each child makes a connection on the shm link, so it publishes its
// stats file, checks that the file is there, and ends with that connection open; the
// parent reaps it and checks that /dev/shm/fastsock-stats.<child> is gone. (SIGKILL cannot
// be handled by any library: tests/preload/shm_leaks.sh checks that `fastsock stat` removes
// those files.)
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum way { EXIT, UNDERSCORE_EXIT, UNDERSCORE_CAPITAL_EXIT, WAYS };
static const char* const way_names[] = {"exit()", "_exit()", "_Exit()"};

int main(void) {
  prog_init("exit_paths");
  for (int w = EXIT; w < WAYS; w++) {
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
