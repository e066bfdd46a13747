// A process with a low descriptor limit opens loopback connections to itself until it gets
// EMFILE. Each shm connection costs the library two eventfds per end besides the sockets,
// so without a budget the application ran out of descriptors with about a third of the
// connections it has without the library. The library upgrades connections only while the
// new socket's number is below half the soft limit and its own descriptors are below a
// third of it (src/fd_budget.hpp); later ones stay on TCP with the reason, every
// connection works, the library holds at most a third of the limit, and the application
// gets at least about two thirds of the connections it gets on the plain kernel (checked:
// at least 3/5).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kLimit = 128, kMaxPairs = kLimit };

int main(void) {
  prog_init("fd_budget");
  const int lfd = tcp_listen(AF_INET, 0, kMaxPairs);
  struct rlimit rl;
  SYS(getrlimit(RLIMIT_NOFILE, &rl));
  CHECK(rl.rlim_max >= kLimit, "hard limit %lu below %d", (unsigned long)rl.rlim_max, kLimit);
  const rlim_t soft = rl.rlim_cur;
  rl.rlim_cur = kLimit;
  SYS(setrlimit(RLIMIT_NOFILE, &rl));

  int client[kMaxPairs], server[kMaxPairs], pairs = 0, on_link = 0, on_tcp = 0;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  const int fds_before = count_fds();
  SYS(getsockname(lfd, (struct sockaddr*)&ss, &sl));
  while (pairs < kMaxPairs) {
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0) {
      CHECK(errno == EMFILE, "socket: errno %d", errno);
      break;
    }
    SYS(connect(c, (struct sockaddr*)&ss, sl));
    const int s = accept(lfd, NULL, NULL);
    if (s < 0) {
      CHECK(errno == EMFILE, "accept: errno %d", errno);
      close(c);
      break;
    }
    client[pairs] = c;
    server[pairs] = s;
    ++pairs;
  }
  // Every connection works, whichever link it is on.
  for (int i = 0; i < pairs; ++i) byte_both_ways(client[i], server[i], i);
  // The limit as it was, for the counts below: listing /proc/self/fd takes a descriptor,
  // and the loop left none (the acceptors' eventfds that the connectors read during the
  // exchange take what the last close gave back).
  rl.rlim_cur = soft;
  SYS(setrlimit(RLIMIT_NOFILE, &rl));
  ok("%d connections under a limit of %d descriptors, each exchanged a byte both ways", pairs,
     kLimit);
  // On the plain kernel about (kLimit - 4) / 2 = 62 pairs fit. The budget leaves the
  // application about two thirds of its descriptors (43 pairs measured, 6 on shm);
  // without it 14 fit. 3/5 leaves room for the library's few rendezvous sockets.
  CHECK(pairs >= (kLimit - 4) / 2 * 3 / 5, "only %d connections fit under a limit of %d",
        pairs, kLimit);
  if (fastsock_present()) {
    // Its descriptors made for these connections, against a third of the limit: the check
    // before each end lets the last connection's two ends (both in this process) add up to
    // three each (two eventfds and a memfd), and a rendezvous channel or two come on top.
    const int library = count_fds() - fds_before - 2 * pairs;
    CHECK(library <= kLimit / 3 + 8, "the library holds %d descriptors under a limit of %d",
          library, kLimit);
    ok("the library holds %d descriptors under a limit of %d", library, kLimit);
  }
  if (fastsock_present() && strcmp(both_ends_link(), "shm") == 0) {
    for (int i = 0; i < pairs; ++i) {
      const char* t = fastsock_transport_of(client[i]);
      if (t && strcmp(t, "shm") == 0) ++on_link;
      else ++on_tcp;
    }
    CHECK(on_link > 0 && on_tcp > 0, "%d connections on shm and %d on tcp: expected both",
          on_link, on_tcp);
    ok("%d connections on shm below half the limit, %d on tcp above it", on_link, on_tcp);
    expect_log("fd=|client|on tcp (shm: descriptors: the rest of RLIMIT_NOFILE is kept for the application");
  }
  for (int i = 0; i < pairs; ++i) {
    close(client[i]);
    close(server[i]);
  }
  close(lfd);
  return 0;
}
