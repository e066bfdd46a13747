// Non-blocking behaviour: O_NONBLOCK set with fcntl (both the plain `fcntl` and `fcntl64`
// symbols), with ioctl(FIONBIO) and with SOCK_NONBLOCK; accept4 flags; non-blocking connect
// (EINPROGRESS, poll for POLLOUT, SO_ERROR 0) over IPv4 and IPv6; a non-blocking connect to
// a closed port (ECONNREFUSED through SO_ERROR); FIONREAD.
//
// meson (and most builds) compile with -D_FILE_OFFSET_BITS=64, which makes glibc's header
// redirect fcntl to fcntl64. Undefining it here makes `fcntl` the plain symbol; fcntl64 is
// called by name. The test script checks with nm that both are referenced.
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

static void expect_would_block(int fd, const char* how) {
  char b;
  ssize_t n = recv(fd, &b, 1, 0);
  CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
        "recv on an empty socket made non-blocking by %s returned %zd", how, n);
  n = read(fd, &b, 1);
  CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
        "read on an empty socket made non-blocking by %s returned %zd", how, n);
}

static void nonblock_three_ways(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);

  int fl = fcntl(s, F_GETFL);
  CHECK(fl >= 0 && !(fl & O_NONBLOCK), "fresh socket flags 0x%x", fl);
  SYS(fcntl(s, F_SETFL, fl | O_NONBLOCK));
  CHECK(fcntl64(s, F_GETFL) & O_NONBLOCK, "fcntl64 F_GETFL does not show O_NONBLOCK");
  expect_would_block(s, "fcntl");
  SYS(fcntl64(s, F_SETFL, fl & ~O_NONBLOCK));
  CHECK(!(fcntl(s, F_GETFL) & O_NONBLOCK), "O_NONBLOCK still set after clearing");
  ok("O_NONBLOCK via fcntl/fcntl64: EAGAIN on empty read, cleared again");

  int on = 1;
  SYS(ioctl(s, FIONBIO, &on));
  CHECK(fcntl(s, F_GETFL) & O_NONBLOCK, "FIONBIO 1 does not show in F_GETFL");
  expect_would_block(s, "ioctl(FIONBIO)");
  on = 0;
  SYS(ioctl(s, FIONBIO, &on));
  CHECK(!(fcntl(s, F_GETFL) & O_NONBLOCK), "FIONBIO 0 left O_NONBLOCK set");
  ok("O_NONBLOCK via ioctl(FIONBIO): shows in F_GETFL, EAGAIN, cleared by FIONBIO 0");

  // FIONREAD: queued byte count, unchanged until read.
  char buf[123];
  fill_pattern(buf, sizeof buf, 3, 0);
  write_all(c, buf, sizeof buf);
  struct pollfd p = {.fd = s, .events = POLLIN};
  CHECK(poll(&p, 1, 10000) == 1, "poll for data");
  int avail = -1;
  SYS(ioctl(s, FIONREAD, &avail));
  CHECK(avail == (int)sizeof buf, "FIONREAD %d, want %zu", avail, sizeof buf);
  read_exact(s, buf, sizeof buf);
  check_pattern(buf, sizeof buf, 3, 0, "FIONREAD data");
  SYS(ioctl(s, FIONREAD, &avail));
  CHECK(avail == 0, "FIONREAD %d after reading everything", avail);
  ok("FIONREAD reports %zu queued bytes, 0 after reading", sizeof buf);

  expect_closed_log(c, sizeof buf, 0);
  expect_closed_log(s, 0, sizeof buf);
  SYS(close(c));
  SYS(close(s));
}

// Non-blocking connect to a listener: EINPROGRESS (or, rarely, immediate success), then
// POLLOUT and SO_ERROR 0; accept4 with SOCK_NONBLOCK|SOCK_CLOEXEC.
static void nonblocking_connect(int family) {
  const char* fam = family == AF_INET ? "IPv4" : "IPv6";
  int lfd = tcp_listen(family, 0, 4);
  int c = (int)SYS(socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  CHECK(fcntl(c, F_GETFL) & O_NONBLOCK, "SOCK_NONBLOCK not in F_GETFL");
  CHECK(fcntl(c, F_GETFD) & FD_CLOEXEC, "SOCK_CLOEXEC not in F_GETFD");
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  SYS(getsockname(lfd, (struct sockaddr*)&ss, &sl));
  int r = connect(c, (struct sockaddr*)&ss, sl);
  CHECK(r == 0 || errno == EINPROGRESS, "non-blocking connect returned %d", r);
  int saw_inprogress = r != 0;
  struct pollfd p = {.fd = c, .events = POLLOUT};
  CHECK(poll(&p, 1, 10000) == 1 && (p.revents & POLLOUT) && !(p.revents & POLLERR),
        "poll after non-blocking connect: revents 0x%x", p.revents);
  int err = -1;
  socklen_t len = sizeof err;
  SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
  CHECK(err == 0, "SO_ERROR after connect is %d", err);
  int s = (int)SYS(accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
  CHECK(fcntl(s, F_GETFL) & O_NONBLOCK, "accept4 SOCK_NONBLOCK not in F_GETFL");
  CHECK(fcntl(s, F_GETFD) & FD_CLOEXEC, "accept4 SOCK_CLOEXEC not in F_GETFD");
  SYS(close(lfd));
  expect_transport(c, both_ends_link());
  expect_transport(s, both_ends_link());
  expect_client_log(c);
  expect_server_log(s);
  expect_would_block(s, "SOCK_NONBLOCK");

  const char msg[] = "after EINPROGRESS";
  write_all(c, msg, sizeof msg);
  p = (struct pollfd){.fd = s, .events = POLLIN};
  CHECK(poll(&p, 1, 10000) == 1, "poll for data");
  char buf[sizeof msg];
  ssize_t n = recv(s, buf, sizeof buf, 0);
  CHECK(n == (ssize_t)sizeof msg && !memcmp(buf, msg, sizeof msg), "recv got %zd", n);
  expect_closed_log(c, sizeof msg, 0);
  expect_closed_log(s, 0, sizeof msg);
  SYS(close(c));
  SYS(close(s));
  ok("%s non-blocking connect: %s, POLLOUT, SO_ERROR 0; accept4 flags; data flows", fam,
     saw_inprogress ? "EINPROGRESS" : "completed at once");
}

// A port that is bound but not listening refuses connections.
static void refused_connect(void) {
  int holder = tcp_listen(AF_INET, 0, 1);
  uint16_t port = local_port(holder);
  SYS(close(holder));
  holder = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));  // keep the port: bind, no listen
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;
  SYS(setsockopt(holder, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  SYS(bind(holder, (struct sockaddr*)&sin, sizeof sin));

  int c = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
  int on = 1;
  SYS(ioctl(c, FIONBIO, &on));
  int r = connect(c, (struct sockaddr*)&sin, sizeof sin);
  if (r == -1 && errno == ECONNREFUSED) {
    ok("non-blocking connect to a closed port: ECONNREFUSED at once");
  } else {
    CHECK(r == -1 && errno == EINPROGRESS, "connect to a closed port returned %d", r);
    struct pollfd p = {.fd = c, .events = POLLOUT};
    CHECK(poll(&p, 1, 10000) == 1 && (p.revents & (POLLERR | POLLHUP)),
          "poll after refused connect: revents 0x%x", p.revents);
    int err = -1;
    socklen_t len = sizeof err;
    SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
    CHECK(err == ECONNREFUSED, "SO_ERROR is %d (%s), want ECONNREFUSED", err, strerror(err));
    SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
    CHECK(err == 0, "SO_ERROR not cleared by reading it: %d", err);
    ok("non-blocking connect to a closed port: EINPROGRESS, POLLERR, SO_ERROR ECONNREFUSED "
       "(then 0)");
  }
  SYS(close(c));
  SYS(close(holder));
}

int main(void) {
  prog_init("nonblock");
  nonblock_three_ways();
  nonblocking_connect(AF_INET);
  if (ipv6_loopback_available())
    nonblocking_connect(AF_INET6);
  else
    note_skip("no IPv6 loopback here: IPv6 non-blocking connect not checked");
  refused_connect();
  return 0;
}
