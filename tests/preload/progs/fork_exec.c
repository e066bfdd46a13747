// fork and the exec family with inherited connections.
//
// 1. fork: parent and child both use the connection they share; each process's own close
//    leaves the other's copy working.
// 2. listener after fork: the parent closes its copy of a listener and at once opens and
//    uses a new connection, while the child accepts on the copy it inherited. The child's
//    listener and accepted connection must keep their own description and counts (the
//    parent's new connection reuses the parent's stats slot of the listener; a child that
//    read it after the fork logged its listener "closed sent=41").
// 3. epoll after a child's close: the parent watches its connection in an epoll set; a
//    forked child closes its inherited copies of the connection and exits. The parent's
//    set must go on reporting the connection, as the kernel's does (an entry leaves a set
//    only when the last descriptor of its file closes, in any process). Under the library
//    the child's close took the connection's entries out of the set both processes share,
//    and the parent's epoll_wait never woke again.
// 4. exec: for each of execve, execv, execvp, execvpe, execl, execlp, execle, fexecve,
//    execveat, vfork+execve and posix_spawn, a child runs exec_child, which keeps using the inherited
//    descriptor (request in, reply out) while the parent talks to it from the other end.
//    posix_spawn's exec happens inside glibc and is not interposed, but the program it
//    starts still inherits LD_PRELOAD (see docs/compatibility.md).
//    Under the library the exec'd program must also see the inherited descriptor tracked
//    (fastsock_transport() = "tcp") and report it closed with its own byte counts.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

extern char** environ;

static void shared_after_fork(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  // If one side fails, the other's read times out instead of hanging.
  struct timeval tv = {15, 0};
  SYS(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  SYS(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  char buf[4096];
  // Bytes sent before the fork and not read yet: under the library they are in shared
  // memory when fork moves the connection to TCP, and must reach the child in order.
  fill_pattern(buf, 400, 7, 0);
  write_all(s, buf, 400);
  fflush(stdout);
  int pid = (int)SYS(fork());
  if (pid == 0) {
    // The child: reads what was sent before the fork, talks on the inherited client end,
    // then closes both inherited copies.
    read_exact(c, buf, 400);
    check_pattern(buf, 400, 7, 0, "bytes sent before the fork");
    fill_pattern(buf, 1000, 1, 0);
    write_all(c, buf, 1000);
    read_exact(c, buf, 500);
    check_pattern(buf, 500, 2, 0, "child's reply");
    // fork moved the connection to TCP (both processes may use it, as with the kernel).
    expect_transport(c, "tcp");
    expect_closed_log(c, 1000, 900);
    expect_closed_log(s, 400, 0);  // (its copy counts what the parent sent before the fork)
    SYS(close(c));
    SYS(close(s));
    ok("child (pid %d) used the inherited connection: 1000 bytes out, 500 in", (int)getpid());
    _exit(0);
  }
  read_exact(s, buf, 1000);
  check_pattern(buf, 1000, 1, 0, "from the child");
  fill_pattern(buf, 500, 2, 0);
  write_all(s, buf, 500);
  wait_child_ok(pid, "forked child");
  // The child closed its copies; the parent's still work, in both directions.
  fill_pattern(buf, 2000, 3, 0);
  write_all(c, buf, 2000);
  read_exact(s, buf, 2000);
  check_pattern(buf, 2000, 3, 0, "parent after the child closed its copy");
  fill_pattern(buf, 700, 4, 0);
  write_all(s, buf, 700);
  read_exact(c, buf, 700);
  check_pattern(buf, 700, 4, 0, "parent's reply");
  expect_transport(c, "tcp");
  if (strcmp(both_ends_link(), "tcp") != 0) {  // (the parent's library moved both ends)
    expect_log("fd=%d falls back to tcp (shm: moved to TCP: fork)", c);
    expect_log("fd=%d falls back to tcp (shm: moved to TCP: fork)", s);
  }
  expect_closed_log(c, 2000, 700);
  expect_closed_log(s, 1600, 3000);
  SYS(close(c));
  SYS(close(s));
  ok("parent and child both used the inherited connection; the child's close left the "
     "parent's copy working");
}

static void epoll_after_child_close(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  byte_both_ways(c, s, 0);
  int ep = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42};
  SYS(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
  fflush(stdout);
  int pid = (int)SYS(fork());
  if (pid == 0) {
    SYS(close(s));
    SYS(close(c));
    _exit(0);
  }
  wait_child_ok(pid, "child closing its copies");
  char buf[64];
  for (int round = 0; round < 3; round++) {
    fill_pattern(buf, 64, 60 + (unsigned)round, 0);
    write_all(c, buf, 64);
    struct epoll_event got = {0};
    const int n = (int)SYS(epoll_wait(ep, &got, 1, 5000));
    CHECK(n == 1 && got.data.u64 == 42 && (got.events & EPOLLIN),
          "round %d: the parent's epoll set reported %d events (data %llu) within 5 s after "
          "the child closed its copy of the connection", round, n,
          (unsigned long long)got.data.u64);
    read_exact(s, buf, 64);
    check_pattern(buf, 64, 60 + (unsigned)round, 0, "after the child's close");
  }
  SYS(close(ep));
  SYS(close(c));
  SYS(close(s));
  ok("the parent's epoll set still reports the connection a forked child closed");
}

static const char* const kHows[] = {"execve",   "execv",  "execvp",  "execvpe",
                                    "execl",    "execlp", "execle",  "fexecve",
                                    "execveat", "vfork",  "posix_spawn"};
enum { kNumHows = sizeof kHows / sizeof kHows[0] };

// Waits until the reply starts to arrive on `fd`, failing at once if the child died first
// (a failed exec'd program never answers). Returns 1 if it reaped the child (status 0).
static int await_reply(int fd, int pid, const char* how) {
  for (int i = 0; i < 300; i++) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) == 1) return 0;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "%s: the exec'd program (pid %d) ended with status 0x%x before replying", how, pid,
            status);
      return 1;  // it finished: its reply is already queued
    }
  }
  CHECK(0, "%s: no reply within 15 s", how);
}

static char g_child_path[4096];

// Runs in the forked child: replaces it with exec_child by `how`. Never returns.
static void listener_after_fork(void) {
  enum { kMessage = 41 };
  int lfd = tcp_listen(AF_INET, 0, 4);
  const uint16_t port = local_port(lfd);
  int go[2];
  SYS(pipe(go));
  fflush(stdout);
  int pid = (int)SYS(fork());
  if (pid == 0) {
    SYS(close(go[1]));
    char token;
    CHECK(read(go[0], &token, 1) == 1, "the parent's go-ahead");
    int s = (int)SYS(accept(lfd, NULL, NULL));
    char l[80];
    local_str(s, l, sizeof l);
    CHECK(local_port(s) == port, "accepted on port %u (listener %u)", local_port(s), port);
    expect_server_log(s);
    char buf[kMessage];
    read_exact(s, buf, kMessage);
    check_pattern(buf, kMessage, 5, 0, "parent's message");
    expect_count(1, "fd=|closed sent=0 received=0$");  // the listener, untouched by the parent
    expect_closed_log(s, 0, kMessage);
    SYS(close(s));
    SYS(close(lfd));
    ok("child accepted on the inherited listener (%s) with its own counts", l);
    _exit(0);
  }
  SYS(close(go[0]));
  SYS(close(lfd));
  int c = tcp_connect(AF_INET, port);
  char buf[kMessage];
  fill_pattern(buf, kMessage, 5, 0);
  write_all(c, buf, kMessage);
  SYS(write(go[1], "g", 1));  // only now: the parent's connection has taken the slot
  SYS(close(go[1]));
  wait_child_ok(pid, "child accepting on the inherited listener");
  expect_closed_log(c, kMessage, 0);
  SYS(close(c));
  ok("parent's new connection and the child's inherited listener kept separate counts");
}

static void exec_by(const char* how, char* const argv[]) {
  const char* path = g_child_path;
  if (!strcmp(how, "execve")) execve(path, argv, environ);
  else if (!strcmp(how, "execv")) execv(path, argv);
  else if (!strcmp(how, "execvp")) execvp("exec_child", argv);  // found through PATH
  else if (!strcmp(how, "execvpe")) execvpe("exec_child", argv, environ);
  else if (!strcmp(how, "execl"))
    execl(path, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], (char*)NULL);
  else if (!strcmp(how, "execlp"))
    execlp("exec_child", argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], (char*)NULL);
  else if (!strcmp(how, "execle"))
    execle(path, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], (char*)NULL, environ);
  else if (!strcmp(how, "execveat")) execveat(AT_FDCWD, path, argv, environ, 0);
  else if (!strcmp(how, "fexecve")) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fexecve(fd, argv, environ);
  }
  printf("FAIL: %s of %s: %s\n", how, path, strerror(errno));
  _exit(127);
}

static void exec_family(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  size_t s_sent = 0, s_received = 0;
  char buf[8192];
  // If an exec'd child fails, its reply never comes: time out instead of hanging.
  struct timeval tv = {15, 0};
  SYS(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  for (int i = 0; i < kNumHows; i++) {
    const char* how = kHows[i];
    size_t req = 1000 + (size_t)i, rep = 3000 + (size_t)i;
    char fd_arg[16], req_arg[16], seed_arg[16], rep_arg[16];
    snprintf(fd_arg, sizeof fd_arg, "%d", c);
    snprintf(req_arg, sizeof req_arg, "%zu", req);
    snprintf(seed_arg, sizeof seed_arg, "%d", 20 + i);
    snprintf(rep_arg, sizeof rep_arg, "%zu", rep);
    char* argv[] = {"exec_child", fd_arg, req_arg, seed_arg, rep_arg, (char*)how, NULL};
    fflush(stdout);
    int pid;
    if (!strcmp(how, "posix_spawn")) {
      CHECK(posix_spawn(&pid, g_child_path, NULL, NULL, argv, environ) == 0, "posix_spawn");
    } else if (!strcmp(how, "vfork")) {
      pid = vfork();
      CHECK(pid >= 0, "vfork");
      if (pid == 0) {
        execve(g_child_path, argv, environ);
        _exit(127);
      }
    } else {
      pid = (int)SYS(fork());
      if (pid == 0) exec_by(how, argv);
    }
    fill_pattern(buf, req, (unsigned)(20 + i), 0);
    write_all(s, buf, req);
    int reaped = await_reply(s, pid, how);
    read_exact(s, buf, rep);
    check_pattern(buf, rep, (unsigned)(120 + i), 0, "reply from the exec'd program");
    if (!reaped) wait_child_ok(pid, how);
    s_sent += req;
    s_received += rep;
    ok("%s: the exec'd program used inherited fd %d (%zu bytes in, %zu out)", how, c, req,
       rep);
  }
  // The parent never used its own copy of the client end.
  expect_closed_log(c, 0, 0);
  expect_closed_log(s, s_sent, s_received);
  SYS(close(c));
  SYS(close(s));
}

// 4. exec without fork: the process that made a connection (on shm, both directions
//    switched, with request bytes in flight toward it) replaces itself with exec_child by
//    each exec call. The connection continues on shm in the new program (it says so through
//    fastsock_transport), the bytes in flight arrive, and the parent's end stays on shm.
//    Exec'd with an environment without LD_PRELOAD, the connection is moved to TCP first.
//    "cloexec-cleared" and "fionclex" exec by execve a socket made SOCK_CLOEXEC whose flag
//    was cleared before its connect, by fcntl(F_SETFD) and ioctl(FIONCLEX): the library
//    remembers the flag socket() gave, and must notice the change (else it would not keep
//    what the connection needs across exec, and the connection would end up on TCP).
static void exec_without_fork(void) {
  static const char* const hows[] = {"execve",  "execv",   "execvp",          "execvpe",
                                     "execl",   "execle",  "execlp",          "fexecve",
                                     "execveat", "cloexec-cleared", "fionclex", "no-library"};
  const int n = (int)(sizeof hows / sizeof hows[0]);
  const int shm = fastsock_present() && strcmp(both_ends_link(), "shm") == 0;
  for (int i = 0; i < n; i++) {
    const char* how = hows[i];
    const int library = strcmp(how, "no-library") != 0;
    const char* link_after = shm && library ? "shm" : "tcp";
    int lfd = tcp_listen(AF_INET, 0, 1);
    const uint16_t port = local_port(lfd);
    fflush(stdout);
    const size_t req = 5000 + (size_t)i, rep = 7000 + (size_t)i;
    const unsigned seed = 60 + (unsigned)i;
    int pid = (int)SYS(fork());
    if (pid == 0) {
      SYS(close(lfd));
      int c;
      if (strcmp(how, "cloexec-cleared") == 0 || strcmp(how, "fionclex") == 0) {
        c = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (strcmp(how, "fionclex") == 0)
          SYS(ioctl(c, FIONCLEX));
        else
          SYS(fcntl(c, F_SETFD, 0));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        SYS(connect(c, (struct sockaddr*)&a, sizeof a));
      } else {
        c = tcp_connect(AF_INET, port);
      }
      // One exchange first: both directions switched to the link before the exec.
      char b = 'x';
      write_all(c, &b, 1);
      read_exact(c, &b, 1);
      char fd_arg[16], req_arg[16], seed_arg[16], rep_arg[16];
      snprintf(fd_arg, sizeof fd_arg, "%d", c);
      snprintf(req_arg, sizeof req_arg, "%zu", req);
      snprintf(seed_arg, sizeof seed_arg, "%u", seed);
      snprintf(rep_arg, sizeof rep_arg, "%zu", rep);
      char* argv[] = {"exec_child", fd_arg, req_arg, seed_arg, rep_arg, (char*)how,
                      (char*)link_after, NULL};
      if (library) exec_by(strcmp(how, "cloexec-cleared") == 0 || strcmp(how, "fionclex") == 0
                               ? "execve"
                               : how,
                           argv);
      // The same program without the library: LD_PRELOAD left out of its environment.
      static char* env[256];
      int k = 0;
      for (char** e = environ; *e && k < 255; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env[k++] = *e;
      env[k] = NULL;
      execve(g_child_path, argv, env);
      _exit(127);
    }
    int s = (int)SYS(accept(lfd, NULL, NULL));
    SYS(close(lfd));
    struct timeval tv = {15, 0};
    SYS(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
    char b;
    read_exact(s, &b, 1);
    // The request goes out before the child execs: in flight on the link across the exec.
    static char buf[16384];
    fill_pattern(buf, req, seed, 0);
    write_all(s, &b, 1);
    write_all(s, buf, req);
    int reaped = await_reply(s, pid, how);
    read_exact(s, buf, rep);
    check_pattern(buf, rep, seed + 100, 0, "reply from the program exec'd without fork");
    CHECK(read(s, &b, 1) == 0, "%s: no end of stream after the reply", how);
    if (!reaped) wait_child_ok(pid, how);
    expect_transport(s, link_after);
    SYS(close(s));
    ok("%s without fork: %zu bytes in flight across the exec, %zu back, on %s after it", how,
       req, rep, link_after);
  }
}

int main(void) {
  prog_init("fork_exec");
  // exec_child sits next to this program; the PATH-searching variants find it there.
  sibling_program("exec_child", g_child_path, sizeof g_child_path);

  shared_after_fork();
  epoll_after_child_close();
  listener_after_fork();
  exec_family();
  exec_without_fork();
  return 0;
}
