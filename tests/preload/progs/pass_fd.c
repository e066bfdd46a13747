// Passing a connection's descriptor with SCM_RIGHTS: the receiving side gets a plain kernel
// socket. Under the library the connection moves back to TCP before the descriptor leaves,
// and the bytes that were still in shared memory reach the new descriptor, in order: the
// peer resends them, here from a thread blocked in recv on its end (as a client waiting for
// its reply would be).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

static void send_fd(int unix_fd, int fd) {
  char byte = 'F';
  struct iovec iov = {&byte, 1};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  CHECK(SYS(sendmsg(unix_fd, &msg, 0)) == 1, "sendmsg with SCM_RIGHTS");
}

static int recv_fd(int unix_fd) {
  char byte;
  struct iovec iov = {&byte, 1};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  CHECK(SYS(recvmsg(unix_fd, &msg, 0)) == 1, "recvmsg with SCM_RIGHTS");
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  CHECK(c && c->cmsg_type == SCM_RIGHTS, "no descriptor received");
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

static int g_server_end;

// The peer: sends 3000 bytes, then waits for the 2000-byte reply.
static void* peer(void* arg) {
  (void)arg;
  char buf[4096];
  fill_pattern(buf, 3000, 21, 0);
  write_all(g_server_end, buf, 3000);
  read_exact(g_server_end, buf, 2000);
  check_pattern(buf, 2000, 22, 0, "reply written on the received descriptor");
  return NULL;
}

int main(void) {
  prog_init("pass_fd");
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  expect_transport(c, both_ends_link());
  char buf[4096];
  g_server_end = s;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, peer, NULL) == 0, "pthread_create");
  sleep_ms(100);  // the peer's 3000 bytes are sent, not read: in flight when c is passed

  int u[2];
  SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, u));
  send_fd(u[0], c);
  expect_transport(c, "tcp");
  int passed = recv_fd(u[1]);
  expect_transport(passed, NULL);  // a descriptor from elsewhere: the kernel's, untracked
  read_exact(passed, buf, 3000);
  check_pattern(buf, 3000, 21, 0, "bytes in flight when the descriptor was passed");
  fill_pattern(buf, 2000, 22, 0);
  write_all(passed, buf, 2000);
  CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
  fill_pattern(buf, 1000, 23, 0);
  write_all(s, buf, 1000);
  read_exact(c, buf, 1000);
  check_pattern(buf, 1000, 23, 0, "the original descriptor still works");
  ok("connection passed with SCM_RIGHTS: nothing lost, both descriptors work");
  SYS(close(passed));
  SYS(close(c));
  SYS(close(s));
  SYS(close(u[0]));
  SYS(close(u[1]));
  return 0;
}
