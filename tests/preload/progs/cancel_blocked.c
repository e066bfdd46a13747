// pthread_cancel of threads blocked in recv(), accept() and poll() on TCP sockets: each
// thread must be cancelled with its cleanup handler run, and the process and the connection
// must go on. A preload library whose hooks cannot be unwound through (a noexcept C++ frame
// on the path) turns this into std::terminate in the host program.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static int cleanups;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int listener, conn;

static void cleanup(void* arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  ++cleanups;
  pthread_mutex_unlock(&lock);
}

static void* in_recv(void* arg) {
  (void)arg;
  char buf[16];
  pthread_cleanup_push(cleanup, NULL);
  recv(conn, buf, sizeof buf, 0);
  pthread_cleanup_pop(0);
  return NULL;
}

static void* in_accept(void* arg) {
  (void)arg;
  pthread_cleanup_push(cleanup, NULL);
  accept(listener, NULL, NULL);
  pthread_cleanup_pop(0);
  return NULL;
}

static void* in_poll(void* arg) {
  (void)arg;
  struct pollfd p = {.fd = conn, .events = POLLIN};
  pthread_cleanup_push(cleanup, NULL);
  poll(&p, 1, -1);
  pthread_cleanup_pop(0);
  return NULL;
}

int main(void) {
  prog_init("cancel_blocked");
  listener = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  SYS(bind(listener, (struct sockaddr*)&a, sizeof a));
  SYS(listen(listener, 4));
  SYS(getsockname(listener, (struct sockaddr*)&a, &len));
  conn = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
  SYS(connect(conn, (struct sockaddr*)&a, sizeof a));
  int peer = (int)SYS(accept(listener, NULL, NULL));
  wait_for_link_up(conn);  // over verbs: block on the link, not on TCP before it is up
  wait_for_link_up(peer);
  expect_transport(conn, both_ends_link());

  pthread_t t[3];
  void* (*fns[3])(void*) = {in_recv, in_accept, in_poll};
  for (int i = 0; i < 3; ++i) CHECK(pthread_create(&t[i], NULL, fns[i], NULL) == 0, "thread %d", i);
  usleep(200 * 1000);  // let them block (a thread cancelled before it blocks passes too)
  for (int i = 0; i < 3; ++i) pthread_cancel(t[i]);
  for (int i = 0; i < 3; ++i) {
    void* rc = NULL;
    pthread_join(t[i], &rc);
    CHECK(rc == PTHREAD_CANCELED, "thread %d ended without being cancelled", i);
  }
  CHECK(cleanups == 3, "cleanup handlers ran %d times, expected 3", cleanups);
  ok("3 threads cancelled in recv/accept/poll, cleanup handlers ran");

  CHECK(SYS(send(peer, "ok", 2, 0)) == 2, "send after the cancellations");
  char buf[2];
  CHECK(SYS(recv(conn, buf, 2, MSG_WAITALL)) == 2 && memcmp(buf, "ok", 2) == 0,
        "the connection carries data after the cancellations");
  ok("connection intact after the cancellations");
  return 0;
}
