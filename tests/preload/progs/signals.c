// Signals: SIGPIPE/EPIPE and EINTR/SA_RESTART.
//
// Writing to a connection that can no longer send (after our own shutdown(SHUT_WR), or
// after the peer reset it) raises SIGPIPE: with the default disposition it kills the
// process (checked in a child); with SIG_IGN the call fails with EPIPE; with MSG_NOSIGNAL
// it fails with EPIPE even under the default disposition.
// A blocking recv interrupted by a handler installed without SA_RESTART fails with EINTR;
// with SA_RESTART it is restarted and returns the data the handler itself sent (the
// handler writes to the peer socket: the write hook runs inside a signal handler while the
// recv hook is blocked). poll and epoll_wait fail with EINTR even with SA_RESTART, as the
// kernel documents (signal(7)); the library must not hide that. A blocking connect
// interrupted by a signal goes on, and the connection it makes works (on shm under the
// library, whose hello went before the SYN).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static void set_sigpipe(void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  SYS(sigaction(SIGPIPE, &sa, NULL));
}

// Puts `c` in a state where the next send fails with EPIPE.
static void make_unsendable(int c, int s, int by_reset) {
  if (!by_reset) {
    SYS(shutdown(c, SHUT_WR));
    return;
  }
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  SYS(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
  SYS(close(s));  // RST: c's first send fails with ECONNRESET or EPIPE
}

// Sends until EPIPE (at most a few tries: after a reset the first error is ECONNRESET).
static void expect_epipe(int c, int flags, const char* how) {
  for (int i = 0; i < 50; i++) {
    ssize_t n = send(c, "x", 1, flags);
    if (n == -1 && errno == EPIPE) {
      ok("%s: send fails with EPIPE, process alive", how);
      return;
    }
    CHECK(n == 1 || (n == -1 && errno == ECONNRESET), "%s: send returned %zd", how, n);
    sleep_ms(10);
  }
  CHECK(0, "%s: no EPIPE after 50 sends", how);
}

// The same through sendfile (the library sends a file's bytes through the link itself):
// after a reset, ECONNRESET once, then EPIPE (a link that repeated the reset there never
// gave EPIPE).
static void expect_epipe_sendfile(int c, const char* how) {
  int file = (int)SYS(memfd_create("signals-sendfile", 0));
  SYS(write(file, "x", 1));
  for (int i = 0; i < 50; i++) {
    off_t at = 0;
    ssize_t n = sendfile(c, file, &at, 1);
    if (n == -1 && errno == EPIPE) {
      ok("%s: sendfile fails with EPIPE, process alive", how);
      SYS(close(file));
      return;
    }
    CHECK(n == 1 || (n == -1 && errno == ECONNRESET), "%s: sendfile returned %zd (%s)", how, n,
          n < 0 ? strerror(errno) : "");
    sleep_ms(10);
  }
  CHECK(0, "%s: no EPIPE after 50 sendfile calls", how);
}

static void sigpipe_kills(int by_reset) {
  fflush(stdout);
  int pid = (int)SYS(fork());
  if (pid == 0) {
    set_sigpipe(SIG_DFL);
    int c, s;
    tcp_pair(AF_INET, &c, &s);
    make_unsendable(c, s, by_reset);
    for (int i = 0; i < 50; i++) {
      send(c, "x", 1, 0);
      sleep_ms(10);
    }
    _exit(3);  // still alive: SIGPIPE did not kill us
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE,
        "child writing to a %s connection ended with status 0x%x, want death by SIGPIPE",
        by_reset ? "reset" : "shut-down", status);
  ok("default SIGPIPE kills the writer (%s connection)", by_reset ? "reset" : "shut-down");
}

static void epipe_cases(void) {
  for (int by_reset = 0; by_reset < 2; by_reset++) {
    const char* what = by_reset ? "reset by peer" : "after SHUT_WR";
    int c, s;
    set_sigpipe(SIG_IGN);
    tcp_pair(AF_INET, &c, &s);
    make_unsendable(c, s, by_reset);
    char how[64];
    snprintf(how, sizeof how, "SIG_IGN, %s", what);
    expect_epipe(c, 0, how);
    SYS(close(c));
    if (!by_reset) SYS(close(s));

    tcp_pair(AF_INET, &c, &s);
    wait_for_link_up(c);  // so that sendfile's bytes go through the link
    wait_for_link_up(s);
    make_unsendable(c, s, by_reset);
    snprintf(how, sizeof how, "SIG_IGN, %s", what);
    expect_epipe_sendfile(c, how);
    SYS(close(c));
    if (!by_reset) SYS(close(s));

    set_sigpipe(SIG_DFL);
    tcp_pair(AF_INET, &c, &s);
    make_unsendable(c, s, by_reset);
    snprintf(how, sizeof how, "MSG_NOSIGNAL, default SIGPIPE, %s", what);
    expect_epipe(c, MSG_NOSIGNAL, how);
    SYS(close(c));
    if (!by_reset) SYS(close(s));
  }
}

static volatile sig_atomic_t g_alarms;
static int g_alarm_write_fd = -1;

static void on_alarm(int sig) {
  (void)sig;
  if (++g_alarms == 3 && g_alarm_write_fd >= 0) {
    int saved = errno;
    (void)!write(g_alarm_write_fd, "!", 1);
    errno = saved;
  }
}

static void set_alarm(int restart, long interval_ms) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigemptyset(&sa.sa_mask);
  SYS(sigaction(SIGALRM, &sa, NULL));
  g_alarms = 0;
  struct itimerval it = {{0, interval_ms * 1000}, {0, interval_ms * 1000}};
  SYS(setitimer(ITIMER_REAL, &it, NULL));
}

static void stop_alarm(void) {
  struct itimerval it = {{0, 0}, {0, 0}};
  SYS(setitimer(ITIMER_REAL, &it, NULL));
  signal(SIGALRM, SIG_IGN);
}

static void eintr_cases(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  char b;

  // Without SA_RESTART: the first alarm interrupts the blocking recv.
  g_alarm_write_fd = -1;
  set_alarm(0, 50);
  ssize_t n = recv(s, &b, 1, 0);
  int e = errno;
  stop_alarm();
  CHECK(n == -1 && e == EINTR, "recv interrupted without SA_RESTART returned %zd errno %d", n,
        e);
  ok("blocking recv + signal without SA_RESTART: EINTR");

  // With SA_RESTART: recv restarts across two alarms; the third alarm's handler sends.
  g_alarm_write_fd = c;
  set_alarm(1, 50);
  n = recv(s, &b, 1, 0);
  e = errno;
  int alarms = g_alarms;
  stop_alarm();
  g_alarm_write_fd = -1;
  CHECK(n == 1 && b == '!', "recv with SA_RESTART returned %zd errno %d", n, e);
  CHECK(alarms >= 3, "recv returned after only %d alarms", alarms);
  ok("blocking recv + signal with SA_RESTART: restarted through %d signals, got the byte "
     "the handler sent", alarms);

  // poll and epoll_wait are never restarted.
  set_alarm(1, 50);
  struct pollfd p = {.fd = s, .events = POLLIN};
  int r = poll(&p, 1, 5000);
  e = errno;
  stop_alarm();
  CHECK(r == -1 && e == EINTR, "poll with SA_RESTART handler returned %d errno %d", r, e);
  int ep = (int)SYS(epoll_create1(0));
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
  SYS(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
  set_alarm(1, 50);
  r = epoll_wait(ep, &ev, 1, 5000);
  e = errno;
  stop_alarm();
  CHECK(r == -1 && e == EINTR, "epoll_wait with SA_RESTART handler returned %d errno %d", r,
        e);
  SYS(close(ep));
  ok("poll and epoll_wait fail with EINTR even with SA_RESTART");

  expect_closed_log(c, 1, 0);
  expect_closed_log(s, 0, 1);
  SYS(close(c));
  SYS(close(s));
}

// A blocking connect interrupted by a signal goes on asynchronously (POSIX). Under the
// library the shm hello went to the listener before the SYN, so the acceptor attaches when
// it accepts: the connector must follow (it is tracked as after EINPROGRESS), or the
// acceptor's bytes would go to a ring nobody reads. The listener's accept queue is full
// (backlog 0, one connection waiting), so the SYN is dropped and the connect blocks until
// the alarm; accepting the waiting connection lets the SYN's retransmission (1 s) in.
static void connect_eintr_case(void) {
  int lfd = tcp_listen(AF_INET, 0, 0);
  const uint16_t port = local_port(lfd);
  int first = tcp_connect(AF_INET, port);
  int c = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  g_alarm_write_fd = -1;
  set_alarm(0, 100);
  int r = connect(c, (struct sockaddr*)&to, sizeof to);
  int e = errno;
  stop_alarm();
  if (r == 0) {  // the kernel took the SYN after all: nothing to interrupt
    note_skip("connect completed before the alarm (accept queue not full)");
  } else {
    CHECK(e == EINTR, "connect to a full accept queue returned %d errno %d", r, e);
    ok("blocking connect + signal: EINTR, the connection goes on");
  }
  int s_first = (int)SYS(accept(lfd, NULL, NULL));
  int s = (int)SYS(accept(lfd, NULL, NULL));  // after the SYN's retransmission
  struct pollfd p = {.fd = c, .events = POLLOUT};
  CHECK(poll(&p, 1, 10000) == 1, "the interrupted connect never completed");
  int err = -1;
  socklen_t len = sizeof err;
  SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
  CHECK(err == 0, "SO_ERROR %d after the interrupted connect", err);
  expect_transport(c, both_ends_link());
  char out[4096], in[4096];
  for (int round = 0; round < 3; round++) {
    fill_pattern(out, sizeof out, (unsigned)round, 0);
    write_all(s, out, sizeof out);  // the acceptor speaks first
    read_exact(c, in, sizeof in);
    check_pattern(in, sizeof in, (unsigned)round, 0, "acceptor to connector");
    write_all(c, in, sizeof in);
    read_exact(s, out, sizeof out);
    check_pattern(out, sizeof out, (unsigned)round, 0, "connector to acceptor");
  }
  ok("the interrupted connection carries 3 x 4 KiB each way, acceptor first");
  SYS(close(c));
  SYS(close(s));
  SYS(close(first));
  SYS(close(s_first));
  SYS(close(lfd));
}

int main(void) {
  prog_init("signals");
  sigpipe_kills(0);
  sigpipe_kills(1);
  epipe_cases();
  set_sigpipe(SIG_DFL);
  eintr_cases();
  connect_eintr_case();
  return 0;
}
