// An edge-triggered writer and a reader in another process, over many fresh connections,
// as nginx sends files to curl: the writer (non-blocking, epoll with EPOLLOUT | EPOLLET)
// writes 64 KiB at a time until EAGAIN, then waits for room; the reader polls for POLLIN and
// reads 16 KiB at a time. Every EAGAIN must be followed by an EPOLLOUT edge: the kernel marks
// a socket it found full (SOCK_NOSPACE) and wakes the writer at the reader's next read.
// Under the library the shm link must do the same even when the reader empties the ring
// between the writer's last write and its arming for room (shm_conn.cc, Conn::send): a lost
// edge leaves the writer waiting for good (nginx sending a 64 MiB file to curl stalled so,
// in the first MiB of about one download in 25). A 5 s epoll_wait with no event after an
// EAGAIN is such a lost edge. Arguments: connections (default 200) and KiB per connection
// (default 2048): fresh connections, because their rings start small and grow.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kWrite = 64 * 1024, kRead = 16 * 1024 };

// Writes `total` bytes of the pattern; returns how many waits for room it took.
static size_t write_stream(int fd, size_t total, int conn) {
  CHECK(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLOUT | EPOLLET, .data.fd = fd};
  CHECK(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll");
  static char buf[kWrite];
  size_t done = 0, eagains = 0;
  while (done < total) {
    const size_t len = total - done < kWrite ? total - done : kWrite;
    fill_pattern(buf, len, (unsigned)conn, done);
    const ssize_t n = write(fd, buf, len);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    CHECK(n < 0 && (errno == EAGAIN || errno == EINTR), "write: %s", strerror(errno));
    if (errno == EINTR) continue;
    ++eagains;
    for (;;) {
      const int k = epoll_wait(ep, &ev, 1, 5000);
      if (k < 0 && errno == EINTR) continue;
      CHECK(k == 1, "connection %d: no EPOLLOUT within 5 s after EAGAIN number %zu, %zu bytes "
            "written: a lost wake-up", conn, eagains, done);
      break;
    }
  }
  close(ep);
  return eagains;
}

// Reads the stream to its end, as curl reads a download; returns its length.
static size_t read_stream(int fd, int conn) {
  static char buf[kRead];
  CHECK(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
  size_t got = 0;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    const int k = poll(&p, 1, 10000);
    CHECK(k == 1 || (k < 0 && errno == EINTR), "connection %d: no POLLIN within 10 s after %zu "
          "bytes", conn, got);
    if (k != 1) continue;
    const ssize_t n = read(fd, buf, kRead);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    CHECK(n >= 0, "read: %s", strerror(errno));
    if (n == 0) return got;
    check_pattern(buf, (size_t)n, (unsigned)conn, got, "the stream");
    got += (size_t)n;
  }
}

int main(int argc, char** argv) {
  prog_init("et_writer");
  const int conns = argc > 1 ? atoi(argv[1]) : 200;
  const size_t each = (size_t)(argc > 2 ? atol(argv[2]) : 2048) << 10;
  const int lfd = tcp_listen(AF_INET, 0, 16);
  const uint16_t port = local_port(lfd);
  // The reader forks before any connection exists (a fork moves existing ones to TCP).
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(lfd);
    for (int i = 0; i < conns; ++i) {
      const int c = tcp_connect(AF_INET, port);
      if (i == 0) expect_transport(c, both_ends_link());
      const size_t got = read_stream(c, i);
      CHECK(got == each, "connection %d: read %zu of %zu bytes", i, got, each);
      close(c);
    }
    ok("the reader got %d streams of %zu bytes intact", conns, each);
    _exit(0);
  }
  size_t waits = 0;
  for (int i = 0; i < conns; ++i) {
    const int s = accept(lfd, NULL, NULL);
    CHECK(s >= 0, "accept: %s", strerror(errno));
    if (i == 0) expect_transport(s, both_ends_link());
    waits += write_stream(s, each, i);
    close(s);
  }
  wait_child_ok(pid, "the reader");
  ok("the edge-triggered writer sent %d streams of %zu bytes, with %zu waits for room, every "
     "one woken", conns, each, waits);
  close(lfd);
  return 0;
}
