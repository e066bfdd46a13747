// Sockets the library must leave alone: UDP (IPv4 and IPv6, unconnected and connected),
// Unix stream and datagram sockets (socketpair and a bound listener), netlink, and a raw
// ICMP socket pinging 127.0.0.1 (where the process may open one). Each one
// works as the kernel says, fastsock_transport() reports it untracked, and the test script
// checks that this process wrote no log line about any descriptor.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"

static void udp(int family) {
  const char* fam = family == AF_INET ? "IPv4" : "IPv6";
  int a = (int)SYS(socket(family, SOCK_DGRAM, 0));
  int b = (int)SYS(socket(family, SOCK_DGRAM, 0));
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sl;
  if (family == AF_INET) {
    struct sockaddr_in* in = (struct sockaddr_in*)&ss;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sl = sizeof *in;
  } else {
    struct sockaddr_in6* in6 = (struct sockaddr_in6*)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    sl = sizeof *in6;
  }
  SYS(bind(a, (struct sockaddr*)&ss, sl));
  SYS(bind(b, (struct sockaddr*)&ss, sl));
  struct sockaddr_storage addr_a, addr_b;
  socklen_t la = sizeof addr_a, lb = sizeof addr_b;
  SYS(getsockname(a, (struct sockaddr*)&addr_a, &la));
  SYS(getsockname(b, (struct sockaddr*)&addr_b, &lb));
  expect_transport(a, NULL);
  expect_transport(b, NULL);

  // Unconnected: sendto/recvfrom keep datagram boundaries and report the sender.
  CHECK(sendto(a, "one", 3, 0, (struct sockaddr*)&addr_b, lb) == 3, "sendto");
  CHECK(sendto(a, "two!", 4, 0, (struct sockaddr*)&addr_b, lb) == 4, "sendto");
  char buf[64];
  struct sockaddr_storage from;
  socklen_t fl = sizeof from;
  ssize_t n = recvfrom(b, buf, sizeof buf, 0, (struct sockaddr*)&from, &fl);
  CHECK(n == 3 && !memcmp(buf, "one", 3), "first datagram: %zd bytes", n);
  CHECK(fl == la && !memcmp(&from, &addr_a, la), "recvfrom did not report the sender");
  n = recv(b, buf, 2, 0);  // a short read truncates the datagram
  CHECK(n == 2 && !memcmp(buf, "tw", 2), "truncated datagram: %zd bytes", n);

  // Connected: send/recv, read/write, sendmsg/recvmsg with MSG_TRUNC reporting.
  SYS(connect(a, (struct sockaddr*)&addr_b, lb));
  SYS(connect(b, (struct sockaddr*)&addr_a, la));
  CHECK(write(a, "hello", 5) == 5, "write on connected UDP");
  struct pollfd p = {.fd = b, .events = POLLIN};
  CHECK(poll(&p, 1, 5000) == 1, "poll on UDP");
  struct iovec iov = {buf, 3};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  n = recvmsg(b, &mh, 0);
  CHECK(n == 3 && (mh.msg_flags & MSG_TRUNC), "recvmsg: %zd bytes, flags 0x%x", n,
        mh.msg_flags);
  CHECK(send(b, "back", 4, 0) == 4, "send on connected UDP");
  CHECK(read(a, buf, sizeof buf) == 4 && !memcmp(buf, "back", 4), "read on connected UDP");
  expect_transport(a, NULL);
  SYS(close(a));
  SYS(close(b));
  ok("%s UDP: datagram boundaries, sender address, truncation, connected send/recv", fam);
}

static void unix_sockets(void) {
  int sp[2];
  SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
  expect_transport(sp[0], NULL);
  write_all(sp[0], "stream", 6);
  char buf[64];
  read_exact(sp[1], buf, 6);
  CHECK(!memcmp(buf, "stream", 6), "unix socketpair data");
  SYS(shutdown(sp[0], SHUT_WR));
  CHECK(read(sp[1], buf, sizeof buf) == 0, "unix socketpair EOF after SHUT_WR");
  SYS(close(sp[0]));
  SYS(close(sp[1]));

  SYS(socketpair(AF_UNIX, SOCK_DGRAM, 0, sp));
  expect_transport(sp[1], NULL);
  CHECK(send(sp[0], "d1", 2, 0) == 2 && send(sp[0], "d22", 3, 0) == 3, "unix dgram send");
  CHECK(recv(sp[1], buf, sizeof buf, 0) == 2 && recv(sp[1], buf, sizeof buf, 0) == 3,
        "unix dgram boundaries");
  SYS(close(sp[0]));
  SYS(close(sp[1]));

  // A Unix stream listener in the abstract namespace: bind, listen, connect, accept.
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  int len = snprintf(sun.sun_path + 1, sizeof sun.sun_path - 1, "fastsock-passthrough-%d",
                     (int)getpid());
  socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
  int lfd = (int)SYS(socket(AF_UNIX, SOCK_STREAM, 0));
  SYS(bind(lfd, (struct sockaddr*)&sun, sl));
  SYS(listen(lfd, 1));
  int c = (int)SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  SYS(connect(c, (struct sockaddr*)&sun, sl));
  int s = (int)SYS(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
  expect_transport(lfd, NULL);
  expect_transport(c, NULL);
  expect_transport(s, NULL);
  static char big[100000];
  fill_pattern(big, sizeof big, 30, 0);
  int pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    write_all(c, big, sizeof big);
    _exit(0);
  }
  SYS(close(c));
  static char in[100000];
  CHECK(read_to_eof(s, in, sizeof in) == sizeof big, "unix stream byte count");
  check_pattern(in, sizeof in, 30, 0, "unix stream data");
  wait_child_ok(pid, "unix writer");
  SYS(close(s));
  SYS(close(lfd));
  ok("Unix sockets: stream and datagram socketpairs, abstract listener, 100000 bytes");
}

static void netlink(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    note_skip("netlink socket: %s", strerror(errno));
    return;
  }
  expect_transport(fd, NULL);
  struct {
    struct nlmsghdr nh;
    struct rtgenmsg g;
  } req = {.nh = {.nlmsg_len = sizeof req, .nlmsg_type = RTM_GETLINK,
                  .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1},
           .g = {.rtgen_family = AF_UNSPEC}};
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  CHECK(sendto(fd, &req, sizeof req, 0, (struct sockaddr*)&kernel, sizeof kernel) ==
            (ssize_t)sizeof req, "netlink sendto");
  static char buf[65536];
  int links = 0, done = 0;
  for (int i = 0; i < 100 && !done; i++) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    CHECK(n > 0, "netlink recv");
    for (struct nlmsghdr* nh = (struct nlmsghdr*)buf; NLMSG_OK(nh, (size_t)n);
         nh = NLMSG_NEXT(nh, n)) {
      if (nh->nlmsg_type == NLMSG_DONE) done = 1;
      else if (nh->nlmsg_type == RTM_NEWLINK) links++;
      else CHECK(nh->nlmsg_type != NLMSG_ERROR, "netlink error reply");
    }
  }
  CHECK(done && links >= 1, "netlink link dump: %d links, done %d", links, done);
  SYS(close(fd));
  ok("netlink: RTM_GETLINK dump lists %d links", links);
}

static uint16_t icmp_checksum(const void* data, size_t len) {
  const uint8_t* p = data;
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (len & 1) sum += (uint32_t)(p[len - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons((uint16_t)~sum);
}

static void raw_icmp(void) {
  int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
  if (fd < 0) {
    note_skip("raw ICMP socket: %s", strerror(errno));
    return;
  }
  expect_transport(fd, NULL);
  struct icmphdr req = {.type = ICMP_ECHO, .un.echo = {.id = htons(0x5a5a), .sequence = htons(7)}};
  req.checksum = icmp_checksum(&req, sizeof req);
  struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(sendto(fd, &req, sizeof req, 0, (struct sockaddr*)&lo, sizeof lo) == sizeof req,
        "raw sendto");
  // A raw socket sees every ICMP packet: our request (looped back) and the reply.
  for (int i = 0; i < 10; i++) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 5000) == 1, "no ICMP packet within 5 s");
    char buf[1500];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    CHECK(n >= (ssize_t)(sizeof(struct iphdr) + sizeof req), "raw recv returned %zd", n);
    const struct iphdr* ip = (const struct iphdr*)buf;
    const struct icmphdr* icmp = (const struct icmphdr*)(buf + ip->ihl * 4);
    if (icmp->type == ICMP_ECHOREPLY && icmp->un.echo.id == htons(0x5a5a)) {
      SYS(close(fd));
      ok("raw ICMP socket: echo reply from 127.0.0.1");
      return;
    }
  }
  CHECK(0, "no ICMP echo reply among 10 packets");
}

int main(void) {
  prog_init("passthrough");
  udp(AF_INET);
  if (ipv6_loopback_available()) udp(AF_INET6);
  else note_skip("no IPv6 loopback: IPv6 UDP not checked");
  unix_sockets();
  netlink();
  raw_icmp();
  expect_no_fd_log();
  return 0;
}
