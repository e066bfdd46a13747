// bench_rendezvous: what the shm rendezvous (shm/shm_rendezvous.hpp) adds to connection
// setup, against plain kernel TCP measured in the same run.
//
// The process listens on 127.0.0.1:<ephemeral> and fork()s: the parent is the server, the
// child the client; connections are set up one after another, and each mode runs in
// alternating batches so that noise hits all modes alike.
//
//   tcp       client: socket, connect, read 1 byte, close (SO_LINGER 0: no TIME_WAIT)
//             server: accept4, write 1 byte, close
//   rv        as tcp, plus the rendezvous: the client dials the record and sends its hello
//             with 2 descriptors (a memfd and an eventfd created once, reused) before its
//             connect, and its `where` after it; the server matches the accepted connection
//             and replies with 1 eventfd; the client waits for that reply (poll) instead of
//             the TCP byte
//   rv+fds    as rv, with a fresh memfd (ftruncate'd to 64 KiB) and two eventfds created
//             per connection: a rough stand-in for the segment setup of the shm transport
//
// Prints connections/s per mode (best and median batch) and each mode's ratio to tcp.
//
// --parts instead times, in one process and without context switches, what a connection's
// setup is made of, each against a TCP connect+accept+close pair measured in the same run:
// where the rendezvous spends its time, and what a different design could save.
//
// --loop N runs only the in-process rendezvous N times, untimed, for counting its system
// calls: strace -c build/bench/bench_rendezvous --loop 1000
//
// usage: bench_rendezvous [--connections N] [--batches B] [--parts] [--loop N]
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "endpoint.hpp"
#include "shm_pool.hpp"
#include "shm_peer_cookie.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_channels.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"
#include "shm_segment.hpp"

using namespace fastsock;
using namespace fastsock::shm;

namespace {

enum Mode { kTcp, kRv, kRvFds, kModes };
const char* const kModeNames[kModes] = {"tcp", "rv", "rv+fds"};

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "bench_rendezvous: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(1);
}

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

void linger_close(int fd) {
  const linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

// The descriptors a client passes: created once (rv) or per connection (rv+fds).
struct ClientFds {
  int fds[2] = {-1, -1};
  void make() {
    fds[0] = memfd_create("bench-rv", MFD_CLOEXEC);
    if (fds[0] < 0 || ftruncate(fds[0], 65536) != 0) die("memfd");
    fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  void drop() {
    for (int& fd : fds) close(fd);
  }
};

void client_once(Mode mode, const sockaddr_in& dst, ClientFds& shared) {
  Dialer d;
  const char* why = nullptr;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ClientFds fresh;
  if (mode == kRvFds) fresh.make();
  ClientFds& use = mode == kRvFds ? fresh : shared;
  if (mode != kTcp) {
    if (d.dial(reinterpret_cast<const sockaddr*>(&dst), sizeof dst, &why) != 0) die(why);
    if (d.send_hello(socket_cookie(fd), use.fds, 2, &why) != 0) die(why);
  }
  while (connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0)
    if (errno != EINTR) die("connect");
  if (mode == kTcp) {
    char byte;
    if (read(fd, &byte, 1) != 1) die("read");
    linger_close(fd);
    return;
  }
  sockaddr_in local{};
  socklen_t len = sizeof local;
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  // The server writes a TCP byte instead of answering when it leaves the connection on
  // TCP: wait for whichever comes.
  if (d.send_where(endpoint_from(reinterpret_cast<sockaddr*>(&local), len), &why) == 0) {
    pollfd p[2] = {{d.fd(), POLLIN, 0}, {fd, POLLIN, 0}};
    while (poll(p, 2, 10000) < 1)
      if (errno != EINTR) die("poll");
    Reply reply;
    PassedFds got;
    if (p[0].revents) d.poll_reply(reply, got, &why);
  }
  if (mode == kRvFds) fresh.drop();
  linger_close(fd);
}

void server_once(Mode mode, int tcp_listener, Listener& record, int server_efd) {
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  const int fd = accept4(tcp_listener, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
  if (fd < 0) die("accept4");
  if (mode == kTcp) {
    if (write(fd, "c", 1) != 1) die("write");
    close(fd);
    return;
  }
  sockaddr_in local{};
  socklen_t local_len = sizeof local;
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len);
  MatchResult m = record.match(endpoint_from(reinterpret_cast<sockaddr*>(&peer), len),
                               endpoint_from(reinterpret_cast<sockaddr*>(&local), local_len));
  if (m.status == MatchStatus::error) die(m.why);
  if (m.status == MatchStatus::not_fastsock) {  // counted, see main()
    if (write(fd, "t", 1) != 1) die("write");
    close(fd);
    return;
  }
  int efd = server_efd;
  if (mode == kRvFds) efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int seg = m.handshake.fds().take(0);  // what the transport would map
  const char* why = nullptr;
  if (m.handshake.accept(&efd, 1, &why) != 0) die(why);
  close(seg);
  if (mode == kRvFds) close(efd);
  close(fd);
}

// ---- --parts ---------------------------------------------------------------------------

struct Part {
  const char* name;
  void (*run)(long n);
};

sockaddr_in g_dst;      // the TCP listener (with a record) of the parts run
int g_tcp_listener;
Listener* g_record;
int g_pair[2];          // an established SOCK_SEQPACKET pair
int g_fds[2];           // a memfd and an eventfd to pass

void part_tcp(long n) {
  for (long i = 0; i < n; ++i) {
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&g_dst), sizeof g_dst) != 0) die("connect");
    const int s = accept4(g_tcp_listener, nullptr, nullptr, SOCK_CLOEXEC);
    linger_close(c);
    close(s);
  }
}

// One in-process rendezvous: hello with 2 descriptors, where, match, reply with 1. With
// `fresh_channel`, the connector's idle channel is closed after each, so every connection
// dials a new one (what each connection cost before channels were kept).
void rendezvous_loop(long n, bool fresh_channel) {
  const char* why = nullptr;
  for (long i = 0; i < n; ++i) {
    Dialer d;
    if (d.dial(reinterpret_cast<sockaddr*>(&g_dst), sizeof g_dst, &why) != 0) die(why);
    stats::Endpoint local = endpoint_from(reinterpret_cast<sockaddr*>(&g_dst), sizeof g_dst);
    local.port = uint16_t(1024 + i % 60000);
    if (d.send_hello(uint64_t(i + 1), g_fds, 2, &why) != 0) die(why);
    if (d.send_where(local, &why) != 0) die(why);
    MatchResult m = g_record->match(local, local);
    if (m.status != MatchStatus::matched) die("match");
    if (m.handshake.accept(&g_fds[1], 1, &why) != 0) die(why);
    Reply reply;
    PassedFds got;
    if (d.poll_reply(reply, got, &why) != ReplyStatus::accepted) die(why);
    if (fresh_channel) channels::close_all();
  }
}

void part_rendezvous(long n) { rendezvous_loop(n, false); }
void part_rendezvous_fresh(long n) { rendezvous_loop(n, true); }

void part_dial_no_record(long n) {
  sockaddr_in nowhere = g_dst;
  nowhere.sin_port = htons(uint16_t(ntohs(g_dst.sin_port) ^ 1));  // no record there
  const char* why = nullptr;
  for (long i = 0; i < n; ++i) {
    Dialer d;
    if (d.dial(reinterpret_cast<sockaddr*>(&nowhere), sizeof nowhere, &why) != -ECONNREFUSED)
      die("dial found a record where none is");
  }
}

// A destination on another host (TEST-NET-2: another host, or no route, unless this host
// has the address; setup_parts checks), on `port`.
sockaddr_in elsewhere(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(0xc6336401);  // 198.51.100.1
  return a;
}

// One name looked up and missed (a wildcard destination tries its exact record only; so
// did a non-loopback destination before wildcard records were tried for this host's own
// addresses).
void part_dial_one_name(long n) {
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(uint16_t(ntohs(g_dst.sin_port) ^ 1));
  const char* why = nullptr;
  for (long i = 0; i < n; ++i) {
    Dialer d;
    if (d.dial(reinterpret_cast<const sockaddr*>(&any), sizeof any, &why) != -ECONNREFUSED)
      die("dial found a record where none is");
  }
}

// What a connection to another host pays when no record exists on its port here: the
// exact name and the two wildcard names looked up.
void part_dial_remote_no_record(long n) {
  const sockaddr_in dst = elsewhere(uint16_t(ntohs(g_dst.sin_port) ^ 1));
  const char* why = nullptr;
  for (long i = 0; i < n; ++i) {
    Dialer d;
    if (d.dial(reinterpret_cast<const sockaddr*>(&dst), sizeof dst, &why) != -ECONNREFUSED)
      die("dial found a record where none is");
  }
}

// ... and when a wildcard listener here has the port: its record is found, then the
// locality proof refuses it.
void part_dial_remote_wildcard(long n) {
  const sockaddr_in dst = elsewhere(uint16_t(ntohs(g_dst.sin_port) ^ 2));
  const char* why = nullptr;
  for (long i = 0; i < n; ++i) {
    Dialer d;
    if (d.dial(reinterpret_cast<const sockaddr*>(&dst), sizeof dst, &why) != -ECONNREFUSED)
      die("dial took the wildcard record for another host's address");
  }
}

// The proof alone (a datagram socket connected to the address, getsockname, close), on an
// address of this host.
void part_local_proof(long n) {
  const stats::Endpoint here = endpoint_from(reinterpret_cast<sockaddr*>(&g_dst), sizeof g_dst);
  for (long i = 0; i < n; ++i)
    if (!destination_is_local(here, 0)) die("127.0.0.1 not proven local");
}

void part_unix_pair(long n) {
  for (long i = 0; i < n; ++i) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
    close(sv[0]);
    close(sv[1]);
  }
}

void message(long n, int nfds) {
  char buf[128] = {};
  for (long i = 0; i < n; ++i) {
    if (send_message(g_pair[0], buf, 48, g_fds, nfds) != 0) die("send");
    Received r;
    recv_message(g_pair[1], buf, sizeof buf, r);
    close_fds(r.control.fds, r.control.fd_count);
  }
}
void part_message(long n) { message(n, 0); }
void part_message_fds(long n) { message(n, 2); }

void part_eventfd(long n) {
  for (long i = 0; i < n; ++i) close(eventfd(0, EFD_CLOEXEC));
}

void part_memfd(long n) {
  for (long i = 0; i < n; ++i) {
    const int fd = memfd_create("bench-part", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 65536) != 0) die("memfd");
    close(fd);
  }
}

// A connection's segment as both ends handle it today: create (memfd, size, seals, map,
// prefault of the header and both 16 KiB windows), attach (fstat, seals, map, header
// checks) of a copy of the descriptor, then both unmapped and closed. This is what a pool of
// segments per process pair would take off each connection's setup.
void part_segment(long n) {
  for (long i = 0; i < n; ++i) {
    Segment created, attached;
    if (!created.create(Limits{}).ok()) die("segment create");
    if (!attached.attach(fcntl(created.fd(), F_DUPFD_CLOEXEC, 0), Limits{}).ok())
      die("segment attach");
  }
}

// The same with the pool of a channel on each end (shm_pool.hpp): after the first
// connection, the connector takes the released slot (layout reset, eventfd drained), the
// acceptor checks and takes its own, and both let go at the end (the acceptor's mark).
void part_pooled_segment(long n) {
  Pool* connector = Pool::create();
  Pool* acceptor = Pool::create();
  Status st;
  const char* why = nullptr;
  for (long i = 0; i < n; ++i) {
    const Pool::Pick pick = connector->pick(Limits{}, st);
    if (!pick.slot) die("pool pick");
    PoolSlot* mine;
    if (pick.op == SlotOp::fresh) {
      Segment attached;
      if (!attached.attach(fcntl(pick.slot->segment.fd(), F_DUPFD_CLOEXEC, 0), Limits{}).ok())
        die("segment attach");
      pick.slot->segment.close_fd();
      pick.slot->peer_bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      mine = acceptor->keep_fresh(pick.slot->id, static_cast<Segment&&>(attached),
                                  eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC),
                                  eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), &why);
    } else {
      mine = acceptor->take_reused(pick.slot->id, &why);
    }
    if (!mine) die(why);
    acceptor->release(mine, 1);
    connector->release(pick.slot, 0);
  }
  connector->close();
  acceptor->close();
}

const Part kParts[] = {
    {"tcp connect+accept+close (2 sockets)", part_tcp},
    {"rendezvous (channel kept, 2+1 fds)", part_rendezvous},
    {"rendezvous (new channel each time, 2+1 fds)", part_rendezvous_fresh},
    {"dial without a record (3 names tried)", part_dial_no_record},
    {"dial 0.0.0.0, no record (1 name tried)", part_dial_one_name},
    {"dial another host, no record (3 names tried)", part_dial_remote_no_record},
    {"dial another host, wildcard here (+proof)", part_dial_remote_wildcard},
    {"locality proof (udp socket+connect+name+close)", part_local_proof},
    {"unix socketpair + 2 close", part_unix_pair},
    {"48-byte message send+recv", part_message},
    {"48-byte message with 2 fds, send+recv+close", part_message_fds},
    {"eventfd + close", part_eventfd},
    {"memfd_create + ftruncate 64K + close", part_memfd},
    {"segment create+attach+unmap (both ends)", part_segment},
    {"pooled segment: take+release (both ends)", part_pooled_segment},
};

// The TCP listener, its record and the descriptors of the in-process parts.
void setup_parts() {
  g_tcp_listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_dst = sockaddr_in{};
  g_dst.sin_family = AF_INET;
  g_dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof g_dst;
  if (bind(g_tcp_listener, reinterpret_cast<sockaddr*>(&g_dst), sizeof g_dst) != 0 ||
      listen(g_tcp_listener, 128) != 0 ||
      getsockname(g_tcp_listener, reinterpret_cast<sockaddr*>(&g_dst), &len) != 0)
    die("listen");
  static Listener record;
  g_record = &record;
  const char* why = nullptr;
  if (record.open(endpoint_from(reinterpret_cast<sockaddr*>(&g_dst), len), &why) != 0) die(why);
  // A wildcard record (no TCP listener needed) on the port part_dial_remote_wildcard dials.
  static Listener wildcard;
  stats::Endpoint any{};
  any.family = AF_INET;
  any.port = uint16_t(ntohs(g_dst.sin_port) ^ 2);
  if (wildcard.open(any, &why) != 0) die(why);
  const sockaddr_in other = elsewhere(1);
  const stats::Endpoint other_ep =
      endpoint_from(reinterpret_cast<const sockaddr*>(&other), sizeof other);
  if (destination_is_local(other_ep, 0))
    die("198.51.100.1 is an address of this host: the 'another host' parts cannot run");
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, g_pair) != 0) die("socketpair");
  g_fds[0] = memfd_create("bench-rv", MFD_CLOEXEC);
  g_fds[1] = eventfd(0, EFD_CLOEXEC);
}

int run_parts(long connections, long batches) {
  setup_parts();
  constexpr int kParts_n = sizeof kParts / sizeof kParts[0];
  std::vector<double> us[kParts_n];
  for (long b = -1; b < batches; ++b) {  // batch -1: untimed warm-up
    for (int p = 0; p < kParts_n; ++p) {
      const long n = b < 0 ? connections / 10 : connections;
      const double t0 = now_ns();
      kParts[p].run(n);
      if (b >= 0) us[p].push_back((now_ns() - t0) / double(n) / 1000.0);
    }
  }
  printf("%-46s %10s %10s\n", "part (in one process)", "best us", "best/tcp");
  double tcp = 0;
  for (int p = 0; p < kParts_n; ++p) {
    std::sort(us[p].begin(), us[p].end());
    if (p == 0) tcp = us[p].front();
    printf("%-46s %10.2f %10.3f\n", kParts[p].name, us[p].front(), us[p].front() / tcp);
  }
  printf("iterations=%ld batches=%ld (best batch)\n", connections, batches);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  long connections = 1000, batches = 5;
  bool parts = false;
  long loop = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--connections") && i + 1 < argc) connections = atol(argv[++i]);
    else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = atol(argv[++i]);
    else if (!strcmp(argv[i], "--parts")) parts = true;
    else if (!strcmp(argv[i], "--loop") && i + 1 < argc) loop = atol(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--connections N] [--batches B] [--parts] [--loop N]\n",
              argv[0]);
      return 2;
    }
  }
  if (connections < 1 || batches < 1) die("--connections and --batches must be positive");
  if (parts) return run_parts(connections, batches);
  if (loop > 0) {
    setup_parts();
    part_rendezvous(loop);
    return 0;
  }

  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof addr;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 128) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0)
    die("listen");
  Listener record;
  const char* why = nullptr;
  if (record.open(endpoint_from(reinterpret_cast<sockaddr*>(&addr), alen), &why) != 0) die(why);

  const long warmup = connections / 10;
  const pid_t child = fork();
  if (child == 0) {
    record.close();
    close(lfd);
    ClientFds shared;
    shared.make();
    std::vector<double> rate[kModes];
    for (long b = -1; b < batches; ++b) {  // batch -1: untimed warm-up
      for (int m = 0; m < kModes; ++m) {
        const long n = b < 0 ? warmup : connections;
        const double t0 = now_ns();
        for (long i = 0; i < n; ++i) client_once(Mode(m), addr, shared);
        if (b >= 0) rate[m].push_back(double(n) / (now_ns() - t0) * 1e9);
      }
    }
    double best_tcp = 0, median_tcp = 0;
    printf("%-8s %14s %14s %10s %10s\n", "mode", "best conn/s", "median conn/s",
           "best/tcp", "median/tcp");
    for (int m = 0; m < kModes; ++m) {
      std::vector<double>& v = rate[m];
      std::sort(v.begin(), v.end());
      const double best = v.back(), median = v[v.size() / 2];
      if (m == kTcp) best_tcp = best, median_tcp = median;
      printf("%-8s %14.0f %14.0f %10.3f %10.3f\n", kModeNames[m], best, median,
             best / best_tcp, median / median_tcp);
    }
    printf("connections=%ld batches=%ld (per mode, alternating)\n", connections, batches);
    fflush(stdout);
    return 0;
  }
  const int server_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  for (long b = -1; b < batches; ++b)
    for (int m = 0; m < kModes; ++m)
      for (long i = 0, n = b < 0 ? warmup : connections; i < n; ++i)
        server_once(Mode(m), lfd, record, server_efd);
  int status = 0;
  waitpid(child, &status, 0);
  const ListenerCounters& c = record.counters();
  printf("server: %llu matched, %llu of them by socket cookie (accepted before the `where`);"
         " %llu stayed on TCP\n",
         (unsigned long long)c.matched, (unsigned long long)c.by_cookie,
         (unsigned long long)c.not_fastsock);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
