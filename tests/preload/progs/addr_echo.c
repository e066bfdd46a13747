// An echo server and client on addresses given on the command line (the other programs use
// loopback), for tests/preload/wildcard_local.sh: which link a connection to a
// non-loopback address of this host takes, and that its bytes arrive exactly.
//
//   addr_echo server --bind ADDR [--port P] [--v6only 0|1] [--port-file F] [--conns N]
//                    [--expect LINK]
//     listens on ADDR:P (P 0: ephemeral, written to F once listening); for each of N
//     connections (0: until killed) reads the request to its end, writes it back, closes.
//     With --expect, under the library, each accepted connection must be on LINK.
//   addr_echo client --connect ADDR --port P [--bytes B] [--seed S] [--expect LINK|refused]
//     connects to ADDR:P, sends B bytes of stream S, half-closes, reads the echo to its end
//     and checks it exactly; under the library the connection must be on LINK. With
//     `refused`, the connect must fail with ECONNREFUSED (with the library too).
//
// LINK is "shm", "tcp", or "link" (both_ends_link(): what two ends under the library take).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { MAX_BYTES = 4 << 20 };

static const char* link_name(const char* want) {
  return want && strcmp(want, "link") == 0 ? both_ends_link() : want;
}

// ADDR:PORT as a sockaddr of ADDR's own family; fails the program on a bad address.
static socklen_t parse_addr(const char* addr, uint16_t port, struct sockaddr_storage* ss) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in* in = (struct sockaddr_in*)ss;
  struct sockaddr_in6* in6 = (struct sockaddr_in6*)ss;
  if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    return sizeof *in;
  }
  CHECK(inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1, "'%s' is not an IP address", addr);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  return sizeof *in6;
}

static int server(const char* bind_addr, uint16_t port, int v6only, const char* port_file,
                  int conns, const char* want) {
  struct sockaddr_storage ss;
  const socklen_t len = parse_addr(bind_addr, port, &ss);
  const int lfd = (int)SYS(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  SYS(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on));
  if (ss.ss_family == AF_INET6 && v6only >= 0)
    SYS(setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only));
  SYS(bind(lfd, (struct sockaddr*)&ss, len));
  SYS(listen(lfd, 16));
  char where[80];
  ok("server: listening on %s%s", local_str(lfd, where, sizeof where),
     v6only == 1 ? " (IPv6 only)" : "");
  if (port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE* f = fopen(tmp, "w");
    CHECK(f != NULL, "cannot write %s", tmp);
    fprintf(f, "%u\n", local_port(lfd));
    CHECK(fclose(f) == 0, "cannot write %s", tmp);
    SYS(rename(tmp, port_file));
  }
  char* buf = malloc(MAX_BYTES);
  CHECK(buf != NULL, "out of memory");
  for (int i = 0; conns == 0 || i < conns; i++) {
    const int fd = (int)SYS(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
    const size_t n = read_to_eof(fd, buf, MAX_BYTES);
    write_all(fd, buf, n);
    char l[80], p[80];
    ok("server: connection %d %s <- %s: %zu bytes echoed", i, local_str(fd, l, sizeof l),
       peer_str(fd, p, sizeof p), n);
    if (want) {
      expect_transport(fd, link_name(want));
      if (strcmp(link_name(want), "shm") == 0) expect_server_log(fd);
    }
    SYS(close(fd));
    expect_closed_log(fd, n, n);
  }
  free(buf);
  SYS(close(lfd));
  return 0;
}

static int client(const char* addr, uint16_t port, size_t bytes, unsigned seed,
                  const char* want) {
  struct sockaddr_storage ss;
  const socklen_t len = parse_addr(addr, port, &ss);
  const int fd = (int)SYS(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int rc = connect(fd, (struct sockaddr*)&ss, len);
  if (want && strcmp(want, "refused") == 0) {
    CHECK(rc == -1 && errno == ECONNREFUSED, "connect to %s port %u: %s, want ECONNREFUSED",
          addr, port, rc == 0 ? "connected" : strerror(errno));
    ok("client: connect to %s port %u refused", addr, port);
    // Whatever the library tried, nothing of this process went on shm.
    expect_no_log("on shm");
    SYS(close(fd));
    return 0;
  }
  CHECK(rc == 0, "connect to %s port %u: %s", addr, port, strerror(errno));
  char l[80], p[80];  // now: once the server closed, the peer has no name any more
  local_str(fd, l, sizeof l);
  peer_str(fd, p, sizeof p);
  char* out = malloc(bytes + 1);
  char* in = malloc(bytes + 1);
  CHECK(out != NULL && in != NULL, "out of memory");
  fill_pattern(out, bytes, seed, 0);
  write_all(fd, out, bytes);
  SYS(shutdown(fd, SHUT_WR));
  const size_t n = read_to_eof(fd, in, bytes + 1);
  CHECK(n == bytes, "echo of %zu bytes, want %zu", n, bytes);
  check_pattern(in, bytes, seed, 0, "the echo");
  ok("client: %s -> %s: %zu bytes echoed exactly", l, p, bytes);
  if (want) {
    expect_transport(fd, link_name(want));
    expect_log("fd=%d client %s -> %s on %s", fd, l, p, link_name(want));
  }
  SYS(close(fd));
  expect_closed_log(fd, bytes, bytes);
  free(out);
  free(in);
  return 0;
}

int main(int argc, char** argv) {
  prog_init("addr_echo");
  if (argc < 2) goto usage;
  const char* addr = NULL;
  const char* port_file = NULL;
  const char* want = NULL;
  uint16_t port = 0;
  int v6only = -1, conns = 1;
  size_t bytes = 100000;
  unsigned seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const char* k = argv[i];
    const char* v = argv[i + 1];
    if (!strcmp(k, "--bind") || !strcmp(k, "--connect")) addr = v;
    else if (!strcmp(k, "--port")) port = (uint16_t)atoi(v);
    else if (!strcmp(k, "--v6only")) v6only = atoi(v);
    else if (!strcmp(k, "--port-file")) port_file = v;
    else if (!strcmp(k, "--conns")) conns = atoi(v);
    else if (!strcmp(k, "--bytes")) bytes = strtoul(v, NULL, 10);
    else if (!strcmp(k, "--seed")) seed = (unsigned)atoi(v);
    else if (!strcmp(k, "--expect")) want = v;
    else goto usage;
  }
  if (!addr || bytes > MAX_BYTES) goto usage;
  hang_guard(60, argv[1]);
  if (!strcmp(argv[1], "server")) return server(addr, port, v6only, port_file, conns, want);
  if (!strcmp(argv[1], "client") && port != 0) return client(addr, port, bytes, seed, want);
usage:
  fprintf(stderr,
          "usage: %s server --bind ADDR [--port P] [--v6only 0|1] [--port-file F] [--conns N]"
          " [--expect LINK]\n"
          "       %s client --connect ADDR --port P [--bytes B] [--seed S]"
          " [--expect LINK|refused]\n",
          argv[0], argv[0]);
  return 2;
}
