// Stream semantics on loopback TCP pairs inside one process: names and options, MSG_PEEK,
// MSG_WAITALL (the data arrives in pieces from a second thread), MSG_DONTWAIT, MSG_MORE,
// readv/writev, sendmsg/recvmsg, sendto/recvfrom, sendmmsg/recvmmsg, half-close
// (shutdown SHUT_WR: the peer reads EOF and still sends back), SHUT_RD and SHUT_RDWR (what
// was already there is still read, then end of stream; SHUT_RDWR also ends the writes) and
// SO_LINGER (zero linger resets the connection; a positive linger delivers everything
// first).
//
// The program counts every byte each descriptor sends and consumes (peeked bytes are not
// consumed) and, under fastsock, expects exactly those counts in the `closed` log lines.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"

struct counted {
  int fd;
  size_t sent, received;
};

static struct counted g_c, g_s;  // the client and server ends of the main pair

static void names_and_options(void) {
  char a[80], b[80];
  CHECK(!strcmp(local_str(g_c.fd, a, sizeof a), peer_str(g_s.fd, b, sizeof b)),
        "client local %s != server peer %s", a, b);
  CHECK(!strcmp(peer_str(g_c.fd, a, sizeof a), local_str(g_s.fd, b, sizeof b)),
        "client peer %s != server local %s", a, b);
  int v = -1;
  socklen_t len = sizeof v;
  SYS(getsockopt(g_c.fd, SOL_SOCKET, SO_TYPE, &v, &len));
  CHECK(v == SOCK_STREAM, "SO_TYPE %d", v);
  len = sizeof v;
  SYS(getsockopt(g_c.fd, SOL_SOCKET, SO_DOMAIN, &v, &len));
  CHECK(v == AF_INET, "SO_DOMAIN %d", v);
  int one = 1;
  SYS(setsockopt(g_c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
  v = 0;
  len = sizeof v;
  SYS(getsockopt(g_c.fd, IPPROTO_TCP, TCP_NODELAY, &v, &len));
  CHECK(v == 1, "TCP_NODELAY reads back %d", v);
  ok("getsockname/getpeername agree across the pair; SO_TYPE, SO_DOMAIN, TCP_NODELAY");
}

static void peek(void) {
  const char msg[] = "hello, peek";
  size_t len = sizeof msg - 1;
  write_all(g_c.fd, msg, len);
  g_c.sent += len;
  char buf[64] = {0};
  ssize_t n = recv(g_s.fd, buf, 5, MSG_PEEK | MSG_WAITALL);
  CHECK(n == 5 && !memcmp(buf, "hello", 5), "MSG_PEEK returned %zd '%.*s'", n, (int)n, buf);
  int avail = -1;
  SYS(ioctl(g_s.fd, FIONREAD, &avail));
  CHECK(avail == (int)len, "FIONREAD after MSG_PEEK is %d, want %zu", avail, len);
  n = recv(g_s.fd, buf, len, MSG_WAITALL);
  CHECK(n == (ssize_t)len && !memcmp(buf, msg, len), "read after peek returned %zd", n);
  g_s.received += len;
  ok("MSG_PEEK sees the bytes without consuming them (FIONREAD unchanged, read gets them)");
}

static void* piecewise_writer(void* arg) {
  (void)arg;
  char buf[1000];
  for (int i = 0; i < 3; i++) {
    sleep_ms(20);
    fill_pattern(buf, sizeof buf, 5, (size_t)i * sizeof buf);
    write_all(g_c.fd, buf, sizeof buf);
  }
  return NULL;
}

static void waitall(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, piecewise_writer, NULL) == 0, "pthread_create");
  char buf[3000];
  ssize_t n = recv(g_s.fd, buf, sizeof buf, MSG_WAITALL);
  CHECK(n == (ssize_t)sizeof buf, "MSG_WAITALL returned %zd of %zu", n, sizeof buf);
  check_pattern(buf, sizeof buf, 5, 0, "MSG_WAITALL data");
  pthread_join(t, NULL);
  g_c.sent += sizeof buf;
  g_s.received += sizeof buf;
  ok("MSG_WAITALL returns all 3000 bytes written in three pieces 20 ms apart");
}

static void dontwait_and_more(void) {
  char buf[16];
  ssize_t n = recv(g_s.fd, buf, sizeof buf, MSG_DONTWAIT);
  CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
        "MSG_DONTWAIT on an empty blocking socket returned %zd", n);
  SYS(send(g_c.fd, "ab", 2, MSG_MORE));
  SYS(send(g_c.fd, "cd", 2, 0));
  g_c.sent += 4;
  n = recv(g_s.fd, buf, 4, MSG_WAITALL);
  CHECK(n == 4 && !memcmp(buf, "abcd", 4), "after MSG_MORE got %zd bytes", n);
  g_s.received += 4;
  ok("MSG_DONTWAIT gives EAGAIN on an empty blocking socket; MSG_MORE data arrives");
}

static void vectors(void) {
  char a[100], b[1], c[2000];
  fill_pattern(a, sizeof a, 7, 0);
  fill_pattern(b, sizeof b, 7, 100);
  fill_pattern(c, sizeof c, 7, 101);
  struct iovec out[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
  size_t total = sizeof a + sizeof b + sizeof c;
  ssize_t n = writev(g_c.fd, out, 3);
  CHECK(n == (ssize_t)total, "writev returned %zd", n);
  g_c.sent += total;
  // readv with a different split; loop in case the kernel returns less.
  char x[1500], y[601];
  size_t got = 0;
  while (got < total) {
    char* base = got < sizeof x ? x + got : y + (got - sizeof x);
    struct iovec in[2];
    int cnt = 0;
    if (got < sizeof x) {
      in[cnt++] = (struct iovec){base, sizeof x - got};
      in[cnt++] = (struct iovec){y, sizeof y};
    } else {
      in[cnt++] = (struct iovec){base, total - got};
    }
    n = readv(g_s.fd, in, cnt);
    CHECK(n > 0, "readv returned %zd", n);
    got += (size_t)n;
  }
  check_pattern(x, sizeof x, 7, 0, "readv first iovec");
  check_pattern(y, sizeof y, 7, sizeof x, "readv second iovec");
  g_s.received += total;
  ok("writev of 3 iovecs / readv into 2 iovecs: %zu bytes intact", total);

  // sendmsg/recvmsg the other way, and sendto/recvfrom with no address (TCP ignores it).
  char m1[300], m2[700];
  fill_pattern(m1, sizeof m1, 8, 0);
  fill_pattern(m2, sizeof m2, 8, sizeof m1);
  struct iovec miov[2] = {{m1, sizeof m1}, {m2, sizeof m2}};
  struct msghdr mh = {.msg_iov = miov, .msg_iovlen = 2};
  n = sendmsg(g_s.fd, &mh, 0);
  CHECK(n == 1000, "sendmsg returned %zd", n);
  g_s.sent += 1000;
  char r[1000];
  struct iovec riov = {r, sizeof r};
  struct msghdr rh = {.msg_iov = &riov, .msg_iovlen = 1};
  n = recvmsg(g_c.fd, &rh, MSG_WAITALL);
  CHECK(n == 1000 && !(rh.msg_flags & MSG_TRUNC), "recvmsg returned %zd flags 0x%x", n,
        rh.msg_flags);
  check_pattern(r, sizeof r, 8, 0, "recvmsg data");
  g_c.received += 1000;
  n = sendto(g_s.fd, m1, 50, 0, NULL, 0);
  CHECK(n == 50, "sendto returned %zd", n);
  g_s.sent += 50;
  n = recvfrom(g_c.fd, r, 50, MSG_WAITALL, NULL, NULL);
  CHECK(n == 50 && !memcmp(r, m1, 50), "recvfrom returned %zd", n);
  g_c.received += 50;
  ok("sendmsg/recvmsg 1000 bytes, sendto/recvfrom 50 bytes intact");
}

static void mmsg(void) {
  enum { kMsgs = 3 };
  static const size_t sizes[kMsgs] = {10, 4000, 333};
  char bufs[kMsgs][4000];
  struct iovec iov[kMsgs];
  struct mmsghdr mm[kMsgs];
  memset(mm, 0, sizeof mm);
  size_t total = 0;
  for (int i = 0; i < kMsgs; i++) {
    fill_pattern(bufs[i], sizes[i], 9, total);
    iov[i] = (struct iovec){bufs[i], sizes[i]};
    mm[i].msg_hdr.msg_iov = &iov[i];
    mm[i].msg_hdr.msg_iovlen = 1;
    total += sizes[i];
  }
  int n = sendmmsg(g_c.fd, mm, kMsgs, 0);
  CHECK(n == kMsgs, "sendmmsg sent %d of %d messages", n, kMsgs);
  for (int i = 0; i < kMsgs; i++)
    CHECK(mm[i].msg_len == sizes[i], "sendmmsg msg %d: msg_len %u", i, mm[i].msg_len);
  g_c.sent += total;

  // A byte stream has no message boundaries: recvmmsg fills buffers in order until
  // nothing more is queued (MSG_WAITFORONE); loop until everything arrived.
  char all[8000];
  size_t got = 0;
  while (got < total) {
    char rb[kMsgs][1024];
    struct iovec riov[kMsgs];
    struct mmsghdr rm[kMsgs];
    memset(rm, 0, sizeof rm);
    for (int i = 0; i < kMsgs; i++) {
      riov[i] = (struct iovec){rb[i], sizeof rb[i]};
      rm[i].msg_hdr.msg_iov = &riov[i];
      rm[i].msg_hdr.msg_iovlen = 1;
    }
    int m = recvmmsg(g_s.fd, rm, kMsgs, MSG_WAITFORONE, NULL);
    CHECK(m > 0, "recvmmsg returned %d", m);
    for (int i = 0; i < m; i++) {
      CHECK(got + rm[i].msg_len <= total, "recvmmsg: more bytes than sent");
      memcpy(all + got, rb[i], rm[i].msg_len);
      got += rm[i].msg_len;
    }
  }
  check_pattern(all, total, 9, 0, "recvmmsg data");
  g_s.received += total;
  ok("sendmmsg of %d messages / recvmmsg: %zu bytes intact", kMsgs, total);
}

static void half_close(void) {
  SYS(shutdown(g_c.fd, SHUT_WR));
  char buf[256];
  ssize_t n = recv(g_s.fd, buf, sizeof buf, 0);
  CHECK(n == 0, "server read after client SHUT_WR returned %zd, want EOF", n);
  fill_pattern(buf, 200, 10, 0);
  write_all(g_s.fd, buf, 200);
  g_s.sent += 200;
  memset(buf, 0, sizeof buf);
  read_exact(g_c.fd, buf, 200);
  check_pattern(buf, 200, 10, 0, "data after half-close");
  g_c.received += 200;
  SYS(shutdown(g_s.fd, SHUT_WR));
  n = recv(g_c.fd, buf, sizeof buf, 0);
  CHECK(n == 0, "client read after server SHUT_WR returned %zd, want EOF", n);
  ok("half-close: peer reads EOF after SHUT_WR and still sends 200 bytes back");
}

// shutdown(SHUT_RD) and shutdown(SHUT_RDWR) on their own pairs, with bytes waiting.
static void shut_read(void) {
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  char buf[256], in[256];
  fill_pattern(buf, 100, 12, 0);
  write_all(c, buf, 100);
  SYS(shutdown(s, SHUT_RD));
  // Linux still returns what was queued before the SHUT_RD, then end of stream; poll says
  // readable (and read-hung-up) from then on, as for an end of stream.
  read_exact(s, in, 100);
  check_pattern(in, 100, 12, 0, "bytes queued before SHUT_RD");
  ssize_t n = recv(s, in, sizeof in, 0);
  CHECK(n == 0, "recv after SHUT_RD with nothing queued returned %zd, want 0", n);
  struct pollfd p = {.fd = s, .events = POLLIN | POLLRDHUP};
  CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLIN) && (p.revents & POLLRDHUP),
        "poll after SHUT_RD: revents %#x, want POLLIN|POLLRDHUP", p.revents);
  // The other direction is untouched: the end that shut its reading still sends.
  fill_pattern(buf, 50, 13, 0);
  write_all(s, buf, 50);
  read_exact(c, in, 50);
  check_pattern(in, 50, 13, 0, "bytes sent after SHUT_RD");
  expect_closed_log(s, 50, 100);
  SYS(close(s));
  CHECK(recv(c, in, sizeof in, 0) == 0, "the peer of a closed end reads end of stream");
  SYS(close(c));
  ok("SHUT_RD: queued bytes still read, then end of stream (poll: POLLIN|POLLRDHUP); sending goes on");

  tcp_pair(AF_INET, &c, &s);
  fill_pattern(buf, 64, 14, 0);
  write_all(s, buf, 64);
  write_all(c, buf, 32);
  SYS(shutdown(c, SHUT_RDWR));
  read_exact(c, in, 64);
  check_pattern(in, 64, 14, 0, "bytes queued before SHUT_RDWR");
  n = recv(c, in, sizeof in, 0);
  CHECK(n == 0, "recv after SHUT_RDWR returned %zd, want 0", n);
  n = send(c, buf, 1, MSG_NOSIGNAL);
  CHECK(n == -1 && errno == EPIPE, "send after SHUT_RDWR returned %zd, want EPIPE", n);
  // The peer gets what was sent before, then end of stream.
  read_exact(s, in, 32);
  check_pattern(in, 32, 14, 0, "bytes sent before SHUT_RDWR");
  n = recv(s, in, sizeof in, 0);
  CHECK(n == 0, "the peer of a SHUT_RDWR end read %zd, want end of stream", n);
  expect_closed_log(c, 32, 64);
  expect_closed_log(s, 64, 32);
  SYS(close(c));
  SYS(close(s));
  ok("SHUT_RDWR: queued bytes still read, then end of stream; send fails with EPIPE; the peer reads all, then end of stream");
}

static void linger(void) {
  // Zero linger: close sends RST, the peer's next read fails with ECONNRESET.
  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  write_all(c, "x", 1);
  char buf[8];
  read_exact(s, buf, 1);  // bytes still queued would be returned before the error
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  SYS(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
  struct linger back;
  socklen_t len = sizeof back;
  SYS(getsockopt(c, SOL_SOCKET, SO_LINGER, &back, &len));
  CHECK(back.l_onoff == 1 && back.l_linger == 0, "SO_LINGER reads back {%d,%d}", back.l_onoff,
        back.l_linger);
  expect_closed_log(c, 1, 0);
  SYS(close(c));
  ssize_t n = recv(s, buf, sizeof buf, 0);
  CHECK(n == -1 && errno == ECONNRESET, "read after peer's zero-linger close returned %zd", n);
  expect_closed_log(s, 0, 1);
  SYS(close(s));
  ok("SO_LINGER {1,0}: close resets the connection, the peer gets ECONNRESET");

  // Positive linger: close blocks until the data is sent; the peer gets all of it, then EOF.
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  lg.l_linger = 5;
  SYS(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
  char data[50000];
  fill_pattern(data, sizeof data, 11, 0);
  write_all(c, data, sizeof data);
  expect_closed_log(c, sizeof data, 0);
  SYS(close(c));
  static char in[60000];
  size_t got = read_to_eof(s, in, sizeof in);
  CHECK(got == sizeof data, "peer of a lingering close read %zu of %zu bytes", got,
        sizeof data);
  check_pattern(in, got, 11, 0, "data before lingering close");
  expect_closed_log(s, 0, got);
  SYS(close(s));
  ok("SO_LINGER {1,5}: all %zu bytes delivered before EOF", got);
}

int main(void) {
  prog_init("stream_ops");
  tcp_pair(AF_INET, &g_c.fd, &g_s.fd);
  expect_transport(g_c.fd, both_ends_link());
  expect_transport(g_s.fd, both_ends_link());
  expect_client_log(g_c.fd);
  expect_server_log(g_s.fd);
  names_and_options();
  peek();
  waitall();
  dontwait_and_more();
  vectors();
  mmsg();
  half_close();
  expect_closed_log(g_c.fd, g_c.sent, g_c.received);
  expect_closed_log(g_s.fd, g_s.sent, g_s.received);
  SYS(close(g_c.fd));
  SYS(close(g_s.fd));
  shut_read();
  linger();
  return 0;
}
