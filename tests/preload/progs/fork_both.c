// Both ends fork at the same moment, each before it read what the other sent: nothing is
// lost either way. Two processes, A (connector) and B (acceptor), with a pipe each way:
//   1. each sends kPart bytes that the other leaves unread (over verbs: on the link, in the
//      other's receive buffers);
//   2. they meet (each writes a byte to the other's pipe and waits for the other's), then
//      both fork at once: the library moves each end's connection to the kernel before the
//      fork; each child exits at once;
//   3. each sends kPart more, shuts its sending side down and reads the other's whole
//      stream to its end, checking every byte: the first part (sent on the link, not
//      consumed when the two left it), then the second (TCP).
// Three rounds. In the first, which end leaves first is the machine's choice. In the second
// both ends also stop for 300 ms in their downgrade, after they posted it and before they
// look at the other's (FASTSOCK_TEST_VERBS_LEAVE_PAUSE_MS), so that each finds the other
// leaving: each must resend what the other dropped (docs/verbs.md, "Both ends at once"),
// and says so in its log (over verbs). In the third B leaves first but stops for 300 ms
// after posting its read of A's leave word (FASTSOCK_TEST_VERBS_LEAVE_READ_PAUSE_MS), and A
// forks 100 ms after B: A's downgrade, asking for what A did not consume, comes in with the
// answer to B's read. A keeps those bytes, so B must not send them again (it once did:
// A read 48 KiB twice).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kPart = 48 * 1024, kTotal = 2 * kPart };

static unsigned seed_of(int acceptor) { return acceptor ? 11 : 5; }

static int over_verbs(void) { return strcmp(both_ends_link(), "verbs") == 0; }

static void send_part(int fd, unsigned seed, size_t offset, size_t len) {
  char* buf = malloc(len);
  CHECK(buf, "malloc");
  fill_pattern(buf, len, seed, offset);
  write_all(fd, buf, len);
  free(buf);
}

static void meet(int out, int in, const char* what) {
  char c = 'm';
  CHECK(write(out, &c, 1) == 1, "write to the pipe (%s)", what);
  CHECK(read(in, &c, 1) == 1, "the other end's word (%s)", what);
}

enum Round { kMachineOrders, kCrossed, kFirstSlowToLook };

static void run_end(int fd, int acceptor, int out, int in, enum Round round) {
  const char* who = acceptor ? "B" : "A";
  // Not by the log's "established" line: B's rounds all log it, under one pid and fd.
  if (over_verbs()) expect_transport(fd, "verbs");
  send_part(fd, seed_of(acceptor), 0, kPart);
  meet(out, in, "both sent");
  sleep_ms(200);  // the messages land in the other's receive buffers
  meet(out, in, "fork now");
  const int slow_b = round == kFirstSlowToLook && acceptor;
  if (round == kFirstSlowToLook && !acceptor) sleep_ms(100);  // B is in its downgrade
  if (slow_b) setenv("FASTSOCK_TEST_VERBS_LEAVE_READ_PAUSE_MS", "300", 1);
  const int pid = fork();
  if (slow_b && pid != 0) unsetenv("FASTSOCK_TEST_VERBS_LEAVE_READ_PAUSE_MS");
  CHECK(pid >= 0, "fork");
  if (pid == 0) _exit(0);
  wait_child_ok(pid, acceptor ? "B's child" : "A's child");
  send_part(fd, seed_of(acceptor), kPart, kPart);
  CHECK(shutdown(fd, SHUT_WR) == 0, "shutdown");
  char* buf = malloc(kTotal);
  CHECK(buf, "malloc");
  const size_t n = read_to_eof(fd, buf, kTotal);
  CHECK(n == kTotal, "%s got %zu bytes, want %d", who, n, kTotal);
  check_pattern(buf, n, seed_of(!acceptor), 0, acceptor ? "A's stream" : "B's stream");
  free(buf);
  if (round == kCrossed && over_verbs())
    expect_log("fd=%d verbs: both ends left the link at once", fd);
  if (round == kFirstSlowToLook && over_verbs()) {
    if (acceptor) expect_log("fd=%d verbs: the peer's downgrade came in while we left first", fd);
    else expect_log("fd=%d verbs: left the link second, after the peer", fd);
  }
  close(fd);
  ok("%s: both ends forked at once, %s read all %d bytes in order", who, who, kTotal);
}

static void run_round(enum Round round) {
  if (round == kCrossed) setenv("FASTSOCK_TEST_VERBS_LEAVE_PAUSE_MS", "300", 1);
  else unsetenv("FASTSOCK_TEST_VERBS_LEAVE_PAUSE_MS");
  const int ls = tcp_listen(AF_INET, 0, 1);
  const uint16_t port = local_port(ls);
  int a_to_b[2], b_to_a[2];
  CHECK(pipe(a_to_b) == 0 && pipe(b_to_a) == 0, "pipe");
  const int a = fork();
  CHECK(a >= 0, "fork");
  if (a == 0) {
    close(ls);
    run_end(tcp_connect(AF_INET, port), 0, a_to_b[1], b_to_a[0], round);
    _exit(0);
  }
  const int s = accept(ls, NULL, NULL);
  CHECK(s >= 0, "accept");
  close(ls);
  run_end(s, 1, b_to_a[1], a_to_b[0], round);
  wait_child_ok(a, "A (the connector)");
  for (int i = 0; i < 2; ++i) {
    close(a_to_b[i]);
    close(b_to_a[i]);
  }
}

int main(void) {
  prog_init("fork_both");
  hang_guard(90, "fork_both");
  run_round(kMachineOrders);
  run_round(kCrossed);
  run_round(kFirstSlowToLook);
  return 0;
}
