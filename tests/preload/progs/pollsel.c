// poll/ppoll/select/pselect pair over one loopback TCP connection.
//
//   pollsel server <api> --port-file PATH    listens, serves one connection, exits
//   pollsel client <api> --port PORT         connects, runs the exchange, exits
//
// <api> is poll, ppoll, select or pselect; every read, write and accept waits for readiness
// with that call first (the sockets are non-blocking). Each side also checks that the call
// times out (returns 0) on a socket with nothing to read, that an idle pipe in the same set
// is not reported, and, at the end, that the peer's close is reported as readable + EOF.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { kRounds = 40, kMaxMsg = 6000 };

static const char* g_api;
static int g_idle_pipe[2];  // never written: must never be reported ready

static size_t msg_len(int round) { return (size_t)(round * 997 % kMaxMsg) + 1; }

// Waits until `fd` is ready for `want` (POLLIN or POLLOUT); returns 0 on timeout.
// Reports the revents seen (poll-style) through *revents.
static int wait_ready(int fd, short want, int timeout_ms, short* revents) {
  int idle = g_idle_pipe[0];
  *revents = 0;
  if (!strcmp(g_api, "poll") || !strcmp(g_api, "ppoll")) {
    struct pollfd fds[2] = {{.fd = fd, .events = (short)(want | POLLRDHUP)},
                            {.fd = idle, .events = POLLIN}};
    int n;
    if (!strcmp(g_api, "poll")) {
      n = poll(fds, 2, timeout_ms);
    } else {
      struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
      sigset_t mask;
      sigemptyset(&mask);
      sigaddset(&mask, SIGUSR1);  // blocked only while waiting: exercises the sigmask path
      n = ppoll(fds, 2, &ts, &mask);
    }
    CHECK(n >= 0, "%s", g_api);
    CHECK(fds[1].revents == 0, "%s reported the idle pipe (revents 0x%x)", g_api,
          fds[1].revents);
    *revents = fds[0].revents;
    return n;
  }
  fd_set rd, wr;
  FD_ZERO(&rd);
  FD_ZERO(&wr);
  FD_SET(idle, &rd);
  if (want & POLLIN) FD_SET(fd, &rd);
  if (want & POLLOUT) FD_SET(fd, &wr);
  int maxfd = fd > idle ? fd : idle;
  int n;
  if (!strcmp(g_api, "select")) {
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    n = select(maxfd + 1, &rd, &wr, NULL, &tv);
  } else {
    struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    n = pselect(maxfd + 1, &rd, &wr, NULL, &ts, &mask);
  }
  CHECK(n >= 0, "%s", g_api);
  CHECK(!FD_ISSET(idle, &rd), "%s reported the idle pipe", g_api);
  if (FD_ISSET(fd, &rd)) *revents |= POLLIN;
  if (FD_ISSET(fd, &wr)) *revents |= POLLOUT;
  return n;
}

static void await(int fd, short want) {
  short rev;
  int n = wait_ready(fd, want, 10000, &rev);
  CHECK(n > 0 && (rev & (want | POLLERR | POLLHUP)), "%s: fd=%d not ready for 0x%x in 10 s",
        g_api, fd, want);
}

static void send_msg(int fd, const char* buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    await(fd, POLLOUT);
    ssize_t n = send(fd, buf + off, len - off, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    CHECK(n > 0, "send");
    off += (size_t)n;
  }
}

static void recv_msg(int fd, char* buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    await(fd, POLLIN);
    ssize_t n = recv(fd, buf + off, len - off, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    CHECK(n > 0, "recv returned %zd after %zu of %zu bytes", n, off, len);
    off += (size_t)n;
  }
}

static void check_timeout(int fd) {
  short rev;
  int n = wait_ready(fd, POLLIN, 50, &rev);
  CHECK(n == 0 && rev == 0, "%s on a socket with nothing to read returned %d (revents 0x%x)",
        g_api, n, rev);
  ok("%s times out (returns 0) on fd=%d with nothing to read", g_api, fd);
}

// After the peer closed: readable, and recv returns 0 (poll also reports POLLRDHUP).
static void check_peer_closed(int fd) {
  short rev;
  int n = wait_ready(fd, POLLIN, 10000, &rev);
  CHECK(n > 0 && (rev & POLLIN), "%s: peer close not reported as readable", g_api);
  if (g_api[0] == 'p' && g_api[1] != 's') {
    // The kernel itself can report POLLIN a moment before POLLRDHUP: tcp_poll reads the
    // shutdown bits without the socket lock, and the FIN advances rcv_nxt (readable)
    // before tcp_fin sets RCV_SHUTDOWN. So POLLRDHUP must follow soon, not at once.
    for (int ms = 0; !(rev & POLLRDHUP) && ms < 10000; ms++) {
      usleep(1000);
      wait_ready(fd, POLLIN, 0, &rev);
    }
    CHECK(rev & POLLRDHUP, "%s: peer close without POLLRDHUP (revents 0x%x)", g_api, rev);
  }
  char c;
  CHECK(recv(fd, &c, 1, 0) == 0, "recv after peer close is not EOF");
  ok("%s reports the peer's close as readable, recv returns 0", g_api);
}

static int serve(const char* port_file) {
  int lfd = tcp_listen(AF_INET, 0, 4);
  SYS(fcntl(lfd, F_SETFL, O_NONBLOCK));
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
  FILE* pf = fopen(tmp, "w");
  CHECK(pf != NULL, "fopen %s", tmp);
  fprintf(pf, "%u\n", local_port(lfd));
  fclose(pf);
  SYS(rename(tmp, port_file));

  await(lfd, POLLIN);
  int fd = (int)SYS(accept4(lfd, NULL, NULL, SOCK_NONBLOCK));
  ok("%s reported the listener readable; accepted fd=%d", g_api, fd);
  expect_transport(fd, both_ends_link());
  expect_server_log(fd);
  SYS(close(lfd));
  // Turn-taking keeps each side's timeout check meaningful: the client stays silent until
  // it got the hello, and the server stays silent after the hello until the first request.
  check_timeout(fd);
  send_msg(fd, "H", 1);

  char buf[kMaxMsg];
  size_t total = 0;
  for (int r = 0; r < kRounds; r++) {
    recv_msg(fd, buf, msg_len(r));
    check_pattern(buf, msg_len(r), (unsigned)r, 0, "request");
    send_msg(fd, buf, msg_len(r));
    total += msg_len(r);
  }
  ok("echoed %d messages, %zu bytes", kRounds, total);
  check_peer_closed(fd);
  expect_closed_log(fd, total + 1, total);
  SYS(close(fd));
  return 0;
}

static int client(int port) {
  int fd = tcp_connect(AF_INET, (uint16_t)port);
  expect_transport(fd, both_ends_link());
  expect_client_log(fd);
  SYS(fcntl(fd, F_SETFL, O_NONBLOCK));
  char buf[kMaxMsg];
  recv_msg(fd, buf, 1);
  CHECK(buf[0] == 'H', "hello byte is 0x%x", buf[0]);
  check_timeout(fd);
  size_t total = 0;
  for (int r = 0; r < kRounds; r++) {
    fill_pattern(buf, msg_len(r), (unsigned)r, 0);
    send_msg(fd, buf, msg_len(r));
    memset(buf, 0, msg_len(r));
    recv_msg(fd, buf, msg_len(r));
    check_pattern(buf, msg_len(r), (unsigned)r, 0, "reply");
    total += msg_len(r);
  }
  ok("%d request/reply rounds, %zu bytes each way, intact", kRounds, total);
  expect_closed_log(fd, total, total + 1);
  SYS(close(fd));
  return 0;
}

int main(int argc, char** argv) {
  CHECK(argc == 5, "usage: %s server|client poll|ppoll|select|pselect --port-file F | "
        "--port P", argv[0]);
  g_api = argv[2];
  CHECK(!strcmp(g_api, "poll") || !strcmp(g_api, "ppoll") || !strcmp(g_api, "select") ||
            !strcmp(g_api, "pselect"), "unknown api %s", g_api);
  prog_init(!strcmp(argv[1], "server") ? "pollsel server" : "pollsel client");
  SYS(pipe(g_idle_pipe));
  printf("api: %s\n", g_api);
  int rc = !strcmp(argv[1], "server") ? serve(argv[4]) : client(atoi(argv[4]));
  close(g_idle_pipe[0]);
  close(g_idle_pipe[1]);
  return rc;
}
