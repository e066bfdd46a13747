// typed_zerocopy: large typed sends on one loopback connection within this process (a
// receiver thread checks every byte), for tests/api/zerocopy.sh, which runs it under the
// library with and without FASTSOCK_ZEROCOPY and reads the library's debug log.
//
//   typed_zerocopy check   4 sends of 8 MiB of doubles, each array overwritten right after
//                          its call returns (the API lets the caller reuse it at once): the
//                          receiver must see each send's values, never the overwrite. Then,
//                          on a second connection whose application enabled SO_TIMESTAMPING,
//                          a large typed send must leave the application's transmit
//                          timestamps readable on the error queue; and one whose
//                          application set SO_ZEROCOPY itself.
//   typed_zerocopy bench N  N sends of 8 MiB; prints "bandwidth: X MB/s".
// Exits 1 on a mismatch, 77 when the connection is not on TCP (the timestamp check needs
// the kernel to carry the data).
#include <arpa/inet.h>
#include <errno.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fastsock/fastsock.h"

#define COUNT (1u << 20) /* doubles per send: 8 MiB */
#define CHECK(cond, what)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "FAIL line %d: %s (errno %d: %s)\n", __LINE__, what, errno,  \
              strerror(errno));                                                    \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static void fill(double* a, unsigned round) {
  for (size_t i = 0; i < COUNT; ++i) a[i] = (double)i * 0.5 + round * 1e7;
}

struct receiver {
  int fd;
  unsigned rounds;
  int verify;
};

static void* receive(void* arg) {
  const struct receiver* r = arg;
  double* got = malloc(COUNT * sizeof(double));
  double* want = malloc(COUNT * sizeof(double));
  CHECK(got && want, "malloc");
  for (unsigned i = 0; i < r->rounds; ++i) {
    CHECK(fastsock_recv_array(r->fd, got, FASTSOCK_DOUBLE, 0, COUNT) == 0, "recv_array");
    if (!r->verify) continue;
    fill(want, i);
    CHECK(memcmp(got, want, COUNT * sizeof(double)) == 0,
          "received values differ from what the send had when it was called");
  }
  free(got);
  free(want);
  return NULL;
}

static void connect_pair(int* out, int* in) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(l >= 0 && bind(l, (struct sockaddr*)&sa, sizeof sa) == 0 && listen(l, 1) == 0 &&
            getsockname(l, (struct sockaddr*)&sa, &len) == 0, "listen");
  *out = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(connect(*out, (struct sockaddr*)&sa, sizeof sa) == 0, "connect");
  *in = accept(l, NULL, NULL);
  CHECK(*in >= 0, "accept");
  close(l);
}

// Sends `rounds` arrays from a receiver thread's peer; overwrites the array after each.
static double send_rounds(int out, int in, unsigned rounds, int verify) {
  double* a = malloc(COUNT * sizeof(double));
  CHECK(a != NULL, "malloc");
  struct receiver r = {in, rounds, verify};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, receive, &r) == 0, "pthread_create");
  struct timespec t0, t1;
  fill(a, 0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned i = 0; i < rounds; ++i) {
    CHECK(fastsock_send_array(out, a, FASTSOCK_DOUBLE, 0, COUNT) == 0, "send_array");
    if (verify) fill(a, i + 1); /* reuse at once: the next round's values */
  }
  CHECK(pthread_join(t, NULL) == 0, "join");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  free(a);
  return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

// The application's own error-queue messages survive a large typed send.
static void timestamps_survive(void) {
  int out, in;
  connect_pair(&out, &in);
  const char* t = fastsock_transport(out);
  if (!t || strcmp(t, "tcp") != 0) {
    printf("skip: timestamps: the connection is on '%s', not the kernel's TCP\n", t ? t : "?");
    close(out);
    close(in);
    return;
  }
  const int ts = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
  CHECK(setsockopt(out, SOL_SOCKET, SO_TIMESTAMPING, &ts, sizeof ts) == 0, "SO_TIMESTAMPING");
  send_rounds(out, in, 1, 1);
  struct pollfd p = {out, 0, 0};
  CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLERR), "a timestamp on the error queue");
  char data[64], control[512];
  struct iovec v = {data, sizeof data};
  struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = control,
                     .msg_controllen = sizeof control};
  CHECK(recvmsg(out, &m, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0, "read the error queue");
  int found = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    found |= c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPING;
  CHECK(found, "the error queue's first message is the application's timestamp");
  printf("ok: with SO_TIMESTAMPING set, the application's transmit timestamp is still on the "
         "error queue after an 8 MiB typed send\n");
  close(out);
  close(in);
}

// A connection whose application set SO_ZEROCOPY itself (the script checks the library's
// log says it left it alone); the data still arrives exact.
static void app_zerocopy(void) {
  int out, in;
  connect_pair(&out, &in);
  const int one = 1;
  CHECK(setsockopt(out, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) == 0, "SO_ZEROCOPY");
  send_rounds(out, in, 1, 1);
  printf("ok: a connection with the application's own SO_ZEROCOPY: 8 MiB exact\n");
  close(out);
  close(in);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2 || (strcmp(argv[1], "check") && strcmp(argv[1], "bench"))) {
    fprintf(stderr, "usage: %s check | bench N\n", argv[0]);
    return 2;
  }
  int out, in;
  connect_pair(&out, &in);
  const char* t = fastsock_transport(out);
  printf("transport: %s\n", t ? t : "(none)");
  if (strcmp(argv[1], "bench") == 0) {
    const unsigned n = argc > 2 ? (unsigned)atoi(argv[2]) : 20;
    const double s = send_rounds(out, in, n, 0);
    printf("bandwidth: %.0f MB/s (%u x 8 MiB in %.3f s)\n",
           (double)n * COUNT * sizeof(double) / s / 1e6, n, s);
    return 0;
  }
  send_rounds(out, in, 4, 1);
  printf("ok: 4 typed sends of 8 MiB, each array overwritten as soon as its call returned: "
         "the receiver saw every send's values\n");
  close(out);
  close(in);
  timestamps_survive();
  app_zerocopy();
  printf("ok: all zerocopy checks passed\n");
  return 0;
}
