// Epoll echo client: opens --clients connections to 127.0.0.1:--port, sends --bytes bytes
// (plus 7*i on connection i, so each connection's byte count is distinct in the log) of a
// known pattern on each, half-closes (shutdown SHUT_WR) once everything is sent, and checks
// that exactly the same bytes come back, followed by EOF with EPOLLRDHUP reported.
//
// --mode lt uses epoll_create1 + epoll_pwait2, level-triggered;
// --mode et uses epoll_create + epoll_wait, edge-triggered.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { kMaxClients = 16 };

struct client {
  int fd;
  unsigned seed;
  size_t total, sent, received;
  int shut, saw_rdhup, saw_eof;
};

static int g_et;
static int g_epfd;

static void update_events(struct client* c) {
  uint32_t ev_mask = EPOLLIN | EPOLLRDHUP | (c->sent < c->total ? EPOLLOUT : 0);
  if (g_et) ev_mask |= EPOLLET;
  struct epoll_event ev = {.events = ev_mask, .data.ptr = c};
  SYS(epoll_ctl(g_epfd, EPOLL_CTL_MOD, c->fd, &ev));
}

static void send_some(struct client* c) {
  char buf[16 * 1024];
  while (c->sent < c->total) {
    size_t len = c->total - c->sent < sizeof buf ? c->total - c->sent : sizeof buf;
    fill_pattern(buf, len, c->seed, c->sent);
    ssize_t n = send(c->fd, buf, len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CHECK(n > 0, "send on fd=%d", c->fd);
    c->sent += (size_t)n;
    if (!g_et) return;  // level-triggered: one send per event is enough
  }
  if (!c->shut) {
    SYS(shutdown(c->fd, SHUT_WR));
    c->shut = 1;
    update_events(c);  // stop asking for EPOLLOUT
  }
}

static void recv_some(struct client* c) {
  char buf[16 * 1024];
  for (;;) {
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CHECK(n >= 0, "recv on fd=%d", c->fd);
    if (n == 0) {
      c->saw_eof = 1;
      return;
    }
    CHECK(c->received + (size_t)n <= c->total, "fd=%d: more echoed than sent", c->fd);
    check_pattern(buf, (size_t)n, c->seed, c->received, "echo");
    c->received += (size_t)n;
    if (!g_et) return;
  }
}

static int wait_events(struct epoll_event* evs, int max) {
  int n;
  if (g_et) {
    n = epoll_wait(g_epfd, evs, max, 1000);
  } else {
    struct timespec ts = {1, 0};
    n = epoll_pwait2(g_epfd, evs, max, &ts, NULL);
  }
  if (n < 0 && errno == EINTR) return 0;
  CHECK(n >= 0, "epoll wait");
  return n;
}

int main(int argc, char** argv) {
  int port = 0, nclients = 1;
  size_t bytes = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mode")) g_et = !strcmp(argv[i + 1], "et");
    else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--clients")) nclients = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--bytes")) bytes = strtoul(argv[i + 1], NULL, 10);
  }
  CHECK(port > 0 && nclients > 0 && nclients <= kMaxClients, "usage: %s --mode lt|et "
        "--port P --clients N --bytes B", argv[0]);
  prog_init("epoll_echo_client");
  printf("mode: %s\n", g_et ? "edge-triggered" : "level-triggered");

  g_epfd = g_et ? (int)SYS(epoll_create(8)) : (int)SYS(epoll_create1(0));
  struct client clients[kMaxClients];
  for (int i = 0; i < nclients; i++) {
    struct client* c = &clients[i];
    memset(c, 0, sizeof *c);
    c->fd = tcp_connect(AF_INET, (uint16_t)port);
    c->seed = (unsigned)i + 1;
    c->total = bytes + 7u * (unsigned)i;
    expect_transport(c->fd, both_ends_link());
    expect_client_log(c->fd);
    SYS(fcntl(c->fd, F_SETFL, SYS(fcntl(c->fd, F_GETFL)) | O_NONBLOCK));
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLOUT | (g_et ? EPOLLET : 0),
                             .data.ptr = c};
    SYS(epoll_ctl(g_epfd, EPOLL_CTL_ADD, c->fd, &ev));
  }

  int done = 0;
  time_t deadline = time(NULL) + 30;
  while (done < nclients) {
    CHECK(time(NULL) < deadline, "only %d of %d connections finished in 30 s", done, nclients);
    struct epoll_event evs[8];
    int n = wait_events(evs, 8);
    for (int i = 0; i < n; i++) {
      struct client* c = evs[i].data.ptr;
      if (c->fd < 0) continue;
      CHECK(!(evs[i].events & EPOLLERR), "EPOLLERR on fd=%d", c->fd);
      if (evs[i].events & EPOLLRDHUP) c->saw_rdhup = 1;
      if (evs[i].events & EPOLLOUT) send_some(c);
      if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) recv_some(c);
      if (c->saw_eof && c->saw_rdhup) {
        CHECK(c->received == c->total, "fd=%d: EOF after %zu of %zu echoed bytes", c->fd,
              c->received, c->total);
        SYS(epoll_ctl(g_epfd, EPOLL_CTL_DEL, c->fd, NULL));
        ok("fd=%d: %zu bytes echoed intact, then EOF with EPOLLRDHUP", c->fd, c->received);
        expect_closed_log(c->fd, c->sent, c->received);
        SYS(close(c->fd));
        c->fd = -1;
        done++;
      }
    }
  }
  SYS(close(g_epfd));
  ok("%d connections, mode %s", nclients, g_et ? "et" : "lt");
  return 0;
}
