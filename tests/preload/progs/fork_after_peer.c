// One end forks after its peer already did, before it read what the peer sent before its
// own fork: nothing is lost. Two processes, A (connector) and B (acceptor):
//   0. A sends 1000 bytes at once (on TCP: the verbs link is not up yet).
//   1. A sends 128 KiB; B reads none of it (on a link: it sits in B's receive buffers).
//   2. A forks (the library moves A's connections to the kernel first; its child exits),
//      then tells B through a pipe.
//   3. B takes note (FIONREAD makes the library look at the link, where A's move to TCP
//      is announced after A's last link bytes) and forks too; B's child reads the whole
//      stream, A's second 128 KiB sent after its fork included, checks every byte and the
//      end of stream: TCP's first 1000 bytes, the link's, then TCP's again.
// The bytes A sent over the link before its fork exist only in B's memory by then (A's
// stream went on on TCP right after them), so B's fork must keep them, not ask A for them
// again. Over verbs (rdma suite) both ends first wait until the link is up.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum { kHead = 1000, kPart = 128 * 1024, kTotal = kHead + 2 * kPart, kSeed = 7 };

static void wait_for_link(int fd) {
  if (strcmp(both_ends_link(), "verbs") == 0)
    wait_for_log(10, "fd=%d verbs: RDMA connection established", fd);
}

static void send_part(int fd, size_t offset, size_t len) {
  char* buf = malloc(len);
  CHECK(buf, "malloc");
  fill_pattern(buf, len, kSeed, offset);
  write_all(fd, buf, len);
  free(buf);
}

// A: sends, forks, says so, sends more, closes.
static void run_connector(uint16_t port, int told) {
  const int c = tcp_connect(AF_INET, port);
  send_part(c, 0, kHead);
  wait_for_link(c);
  send_part(c, kHead, kPart);
  const int pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) _exit(0);
  wait_child_ok(pid, "A's child");
  CHECK(write(told, "f", 1) == 1, "write to the pipe");
  send_part(c, kHead + kPart, kPart);
  close(c);
}

// B's child: the whole stream, in order, then its end.
static void read_all(int fd) {
  char* buf = malloc(kTotal);
  CHECK(buf, "malloc");
  const size_t n = read_to_eof(fd, buf, kTotal);
  CHECK(n == kTotal, "got %zu bytes, want %d", n, kTotal);
  check_pattern(buf, n, kSeed, 0, "the stream of a peer that forked first");
  free(buf);
}

int main(void) {
  prog_init("fork_after_peer");
  const int ls = tcp_listen(AF_INET, 0, 1);
  const uint16_t port = local_port(ls);
  int pipefd[2];
  CHECK(pipe(pipefd) == 0, "pipe");
  const int a = fork();
  CHECK(a >= 0, "fork");
  if (a == 0) {
    close(ls);
    close(pipefd[0]);
    run_connector(port, pipefd[1]);
    _exit(0);
  }
  close(pipefd[1]);
  const int s = accept(ls, NULL, NULL);
  CHECK(s >= 0, "accept");
  close(ls);
  wait_for_link(s);
  char f;
  CHECK(read(pipefd[0], &f, 1) == 1, "A's word that it forked");
  // A's move to TCP follows its last link bytes; let it arrive, then have the library
  // look (a readiness query takes what the link delivered).
  sleep_ms(200);
  int queued = 0;
  CHECK(ioctl(s, FIONREAD, &queued) == 0, "FIONREAD");
  const int b = fork();
  CHECK(b >= 0, "fork");
  if (b == 0) {
    read_all(s);
    _exit(0);
  }
  // Over verbs A's first part was on the link, and B's fork kept it (not asked for again).
  if (strcmp(both_ends_link(), "verbs") == 0)
    expect_log("fd=%d verbs: %d bytes the peer sent before it left the link are kept here", s,
               kPart);
  close(s);
  wait_child_ok(b, "B's child (the reader)");
  wait_child_ok(a, "A (the connector)");
  ok("the peer forked first, then this end: B's child read all %d bytes in order", kTotal);
  return 0;
}
