// Epoll echo server: accepts --conns connections on 127.0.0.1 (ephemeral port, written to
// --port-file), echoes every byte back with non-blocking I/O, and closes a connection once
// its peer half-closed (EPOLLRDHUP) and every byte was echoed. Exits 0 after --conns
// connections, 1 on any mismatch or after a 30 s bound.
//
// --mode lt uses epoll_create + epoll_wait, level-triggered, one read per event;
// --mode et uses epoll_create1 + epoll_pwait, edge-triggered, draining until EAGAIN.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { kMaxConns = 16, kBufSize = 64 * 1024 };

struct conn {
  int fd;
  size_t received, sent;
  char pending[kBufSize];      // bytes read but not yet echoed
  size_t pending_len, pending_off;
  int want_out;                // EPOLLOUT registered
  int saw_rdhup, saw_eof;
};

static int g_et;
static int g_epfd;
static struct conn g_conns[kMaxConns];

static uint32_t base_events(void) { return EPOLLIN | EPOLLRDHUP | (g_et ? EPOLLET : 0); }

// Level-triggered, a full echo buffer stops reading (else EPOLLIN would fire in a loop);
// edge-triggered keeps everything registered and re-checks after each flush.
static uint32_t events_for(int full) {
  if (!full) return base_events();
  return g_et ? base_events() | EPOLLOUT : EPOLLOUT;
}

static void set_nonblock(int fd) {
  int fl = (int)SYS(fcntl(fd, F_GETFL));
  SYS(fcntl(fd, F_SETFL, fl | O_NONBLOCK));
}

// Writes what is pending; registers EPOLLOUT while the socket is full.
static void flush_pending(struct conn* c) {
  while (c->pending_off < c->pending_len) {
    ssize_t n = write(c->fd, c->pending + c->pending_off, c->pending_len - c->pending_off);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    CHECK(n > 0, "echo write on fd=%d returned %zd", c->fd, n);
    c->pending_off += (size_t)n;
    c->sent += (size_t)n;
  }
  int full = c->pending_off < c->pending_len;
  if (!full) c->pending_off = c->pending_len = 0;
  if (full != c->want_out) {
    struct epoll_event ev = {.events = events_for(full), .data.ptr = c};
    SYS(epoll_ctl(g_epfd, EPOLL_CTL_MOD, c->fd, &ev));
    c->want_out = full;
  }
}

// Reads once (lt) or until EAGAIN/EOF (et), as long as there is room to hold the echo.
static void read_some(struct conn* c) {
  do {
    if (c->pending_len == sizeof c->pending) return;  // EPOLLOUT will bring us back
    ssize_t n = read(c->fd, c->pending + c->pending_len, sizeof c->pending - c->pending_len);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CHECK(n >= 0, "read on fd=%d", c->fd);
    if (n == 0) {
      c->saw_eof = 1;
      return;
    }
    c->pending_len += (size_t)n;
    c->received += (size_t)n;
    flush_pending(c);
  } while (g_et);
}

static int finish_if_done(struct conn* c) {
  if (!c->saw_eof || !c->saw_rdhup || c->pending_len != 0) return 0;
  CHECK(c->sent == c->received, "fd=%d echoed %zu of %zu bytes", c->fd, c->sent, c->received);
  SYS(epoll_ctl(g_epfd, EPOLL_CTL_DEL, c->fd, NULL));
  ok("fd=%d: peer half-closed (EPOLLRDHUP seen), echoed %zu bytes", c->fd, c->sent);
  expect_closed_log(c->fd, c->sent, c->received);
  SYS(close(c->fd));
  c->fd = -1;
  return 1;
}

static int wait_events(struct epoll_event* evs, int max) {
  int n;
  if (g_et)
    n = epoll_pwait(g_epfd, evs, max, 1000, NULL);
  else
    n = epoll_wait(g_epfd, evs, max, 1000);
  if (n < 0 && errno == EINTR) return 0;
  CHECK(n >= 0, "epoll wait");
  return n;
}

int main(int argc, char** argv) {
  const char* port_file = NULL;
  int conns = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mode")) g_et = !strcmp(argv[i + 1], "et");
    else if (!strcmp(argv[i], "--conns")) conns = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--port-file")) port_file = argv[i + 1];
  }
  CHECK(port_file && conns > 0 && conns <= kMaxConns, "usage: %s --mode lt|et --conns N "
        "--port-file PATH", argv[0]);
  prog_init("epoll_echo_server");
  printf("mode: %s\n", g_et ? "edge-triggered" : "level-triggered");

  g_epfd = g_et ? (int)SYS(epoll_create1(EPOLL_CLOEXEC)) : (int)SYS(epoll_create(16));
  expect_transport(g_epfd, NULL);
  int lfd = tcp_listen(AF_INET, 0, 16);
  set_nonblock(lfd);
  char addr[80];
  expect_log("fd=%d listen %s", lfd, local_str(lfd, addr, sizeof addr));
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  SYS(epoll_ctl(g_epfd, EPOLL_CTL_ADD, lfd, &lev));

  // Publish the port atomically: the script polls for the file.
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
  FILE* pf = fopen(tmp, "w");
  CHECK(pf != NULL, "fopen %s", tmp);
  fprintf(pf, "%u\n", local_port(lfd));
  fclose(pf);
  SYS(rename(tmp, port_file));

  int accepted = 0, closed = 0;
  time_t deadline = time(NULL) + 30;
  while (closed < conns) {
    CHECK(time(NULL) < deadline, "only %d of %d connections finished in 30 s", closed, conns);
    struct epoll_event evs[8];
    int n = wait_events(evs, 8);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.ptr == NULL) {  // the listener: accept all that are queued
        for (;;) {
          int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
          if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          CHECK(fd >= 0, "accept4");
          CHECK(accepted < conns, "more connections than --conns %d", conns);
          struct conn* c = &g_conns[accepted++];
          memset(c, 0, sizeof *c);
          c->fd = fd;
          expect_transport(fd, both_ends_link());
          expect_server_log(fd);
          struct epoll_event ev = {.events = base_events(), .data.ptr = c};
          SYS(epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev));
          if (!g_et) break;  // level-triggered: the next wait reports the rest
        }
        continue;
      }
      struct conn* c = evs[i].data.ptr;
      if (c->fd < 0) continue;
      CHECK(!(evs[i].events & EPOLLERR), "EPOLLERR on fd=%d", c->fd);
      if (evs[i].events & EPOLLRDHUP) c->saw_rdhup = 1;
      if (evs[i].events & EPOLLOUT) flush_pending(c);
      if (evs[i].events & (EPOLLIN | EPOLLRDHUP)) read_some(c);
      if (g_et && c->pending_len < sizeof c->pending && !c->saw_eof) read_some(c);
      closed += finish_if_done(c);
    }
  }
  SYS(close(lfd));
  SYS(close(g_epfd));
  ok("served %d connections, mode %s", conns, g_et ? "et" : "lt");
  return 0;
}
