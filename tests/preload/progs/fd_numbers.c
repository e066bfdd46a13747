// The application's descriptor numbers are those it gets without the library. The kernel
// hands out the lowest free number, so every descriptor the library keeps for a connection
// (over shm: an eventfd of its own and its peer's at each end) would push the application's
// next ones up: wrk sizes its event loop for 10 + 3 x its connections descriptors and
// counted connect errors under the library until the library's descriptors moved above the
// application's (internal_fds::take, docs/compatibility.md). Here: loopback connections to
// this process (over the link FASTSOCK_TEST_LINK names: shm by default, verbs in the rdma
// suite, vendor with the test library), each socket checked to get the number the plain
// kernel gives it (the
// lowest free one, skipping only what was open before), each connection on the link, and
// the library's own descriptors counted to be there, elsewhere.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kPairs = 24, kSeen = 1024 };

static unsigned char g_open_before[kSeen];  // descriptors open before the connections

static void note_open_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  CHECK(d != NULL, "opendir /proc/self/fd");
  const int own = dirfd(d);
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    const int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd != own && fd < kSeen) g_open_before[fd] = 1;
  }
  closedir(d);
}

// The number the kernel gives next without the library: the lowest one at or above `from`
// (the numbers below are the application's already) that was not open before.
static int lowest_free_from(int from) {
  while (from < kSeen && g_open_before[from]) ++from;
  return from;
}

int main(void) {
  prog_init("fd_numbers");
  const int lfd = tcp_listen(AF_INET, 0, kPairs);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  SYS(getsockname(lfd, (struct sockaddr*)&ss, &sl));
  // A first connection sets up what the process needs once (a rendezvous channel, the RDMA
  // connection manager and device contexts, which librdmacm opens for itself): those take
  // the numbers that are free then, as any library's first use does. What must not move
  // the application's numbers is each further connection.
  const int warm_client = SYS(socket(AF_INET, SOCK_STREAM, 0));
  SYS(connect(warm_client, (struct sockaddr*)&ss, sl));
  const int warm_server = SYS(accept(lfd, NULL, NULL));
  char w = 'w';
  write_all(warm_client, &w, 1);
  read_exact(warm_server, &w, 1);
  wait_for_link_up(warm_client);
  wait_for_link_up(warm_server);
  const int fds_before = count_fds();
  note_open_fds();
  int next = 0;

  int client[kPairs], server[kPairs];
  for (int i = 0; i < kPairs; ++i) {
    next = lowest_free_from(next);
    client[i] = SYS(socket(AF_INET, SOCK_STREAM, 0));
    CHECK(client[i] == next, "pair %d: socket() gave %d, the lowest free number is %d", i,
          client[i], next);
    ++next;
    SYS(connect(client[i], (struct sockaddr*)&ss, sl));
    next = lowest_free_from(next);
    server[i] = SYS(accept(lfd, NULL, NULL));
    CHECK(server[i] == next, "pair %d: accept() gave %d, the lowest free number is %d", i,
          server[i], next);
    ++next;
    // A byte each way: the link's descriptors (the peer's eventfd comes with its answer)
    // are all made before the next socket. The verbs and vendor links come up after the
    // connect, their descriptors made by the library's thread meanwhile: waited for here,
    // or one of them may hold the lowest number for a moment when the next socket() runs
    // (docs/compatibility.md, "descriptor numbers").
    byte_both_ways(client[i], server[i], i);
    wait_for_link_up(client[i]);
    wait_for_link_up(server[i]);
  }
  ok("%d connections: every socket got the number the kernel gives without the library",
     kPairs);

  const char* link = both_ends_link();
  if (fastsock_present()) {
    // The verbs and vendor links come up after the connect: their last descriptors too.
    for (int i = 0; i < kPairs; ++i) {
      wait_for_link_up(client[i]);
      wait_for_link_up(server[i]);
      expect_transport(client[i], link);
      expect_transport(server[i], link);
    }
    // At least two per end, both ends in this process: shm's eventfd and its peer's, the
    // verbs link's wake-up set and completion channel, the vendor link's eventfd and set.
    const int library_fds = count_fds() - fds_before - 2 * kPairs;
    CHECK(library_fds >= 4 * kPairs, "only %d descriptors besides the sockets", library_fds);
    ok("all on %s; the library's %d other descriptors kept out of the application's numbers",
       link, library_fds);
  } else {
    const int library_fds = count_fds() - fds_before - 2 * kPairs;
    CHECK(library_fds == 0, "%d descriptors besides the sockets on the plain kernel",
          library_fds);
  }
  for (int i = 0; i < kPairs; ++i) {
    close(client[i]);
    close(server[i]);
  }
  close(warm_client);
  close(warm_server);
  close(lfd);
  return 0;
}
