// Pooled segments per rendezvous channel (shm/shm_pool.hpp): whole shm connections (Conn on
// both ends, over a real Listener, channel and loopback TCP), in one process or two, checking
// reuse, the exact byte streams, the acceptor's refusals, fork, a dying peer and scribbles.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous_helpers.hpp"
#include "shm_conn.hpp"
#include "shm_layout.hpp"
#include "shm_pool.hpp"
#include "shm_rendezvous.hpp"

using namespace fastsock::shm;
using namespace rvtest;

namespace {

ConnOptions options() { return ConnOptions{Limits{}, 128 * 1024, 0}; }

// The segments mapped in this process (/proc/self/maps), by start address.
std::vector<Layout*> mapped_segments() {
  std::vector<Layout*> out;
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return out;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "fastsock-shm")) continue;
    unsigned long start = 0;
    if (sscanf(line, "%lx-", &start) == 1) out.push_back(reinterpret_cast<Layout*>(start));
  }
  fclose(f);
  return out;
}

// A connection's pattern: byte i of connection `seed`.
std::string pattern(unsigned seed, size_t len) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = char((i * 7 + seed * 131 + 1) & 0xff);
  return s;
}

ssize_t send_all(Conn& c, int fd, const std::string& bytes) {
  iovec v{const_cast<char*>(bytes.data()), bytes.size()};
  return c.send(fd, &v, 1, 0);
}

// Exactly `len` bytes (MSG_WAITALL), then nothing more waiting.
std::string recv_exact(Conn& c, int fd, size_t len, bool& more) {
  std::string s(len, '\0');
  iovec v{s.data(), len};
  const ssize_t n = c.recv(fd, &v, 1, MSG_WAITALL);
  s.resize(n > 0 ? size_t(n) : 0);
  char extra;
  iovec e{&extra, 1};
  more = c.recv(fd, &e, 1, MSG_DONTWAIT) != -EAGAIN;
  return s;
}

// One connection between a connector Conn and an acceptor Conn of this process.
struct Pair {
  int cfd = -1, afd = -1;
  // What the core remembers of each socket's mode (socket_mode.hpp): the Socket's, which
  // outlives its Conn.
  fastsock::SocketMode connector_mode, acceptor_mode;
  std::unique_ptr<Conn> connector, acceptor;
  std::string why;
  ~Pair() { end(); }
  void end() {
    // The acceptor first, as a server that closes after its reply: its release mark is
    // what lets the connector reuse the slot.
    if (acceptor) acceptor->close();
    acceptor.reset();
    if (connector) connector->close();
    connector.reset();
    if (afd >= 0) close(afd);
    if (cfd >= 0) close(cfd);
    afd = cfd = -1;
  }
};

// The connector's side of a connection to `server`, the way the preload hooks do it: the
// hello, the connect, then the acceptor's socket accepted (not matched yet).
bool open_connector(Pair& p, const TcpServer& server) {
  p.connector = std::make_unique<Conn>(options(), p.connector_mode);
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(server.local, ss);
  const char* why = "";
  p.cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p.connector->prepare(p.cfd, reinterpret_cast<sockaddr*>(&ss), len, &why) < 0) {
    p.why = why;
    return false;
  }
  if (connect(p.cfd, reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  if (p.connector->start_connector(p.cfd, &why) < 0) {
    p.why = why;
    return false;
  }
  p.afd = accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
  return p.afd >= 0;
}

// Sets up a connection to `server` (its listener `l`) the way the preload hooks do.
bool open_pair(Pair& p, const TcpServer& server, Listener& l) {
  if (!open_connector(p, server)) return false;
  const char* why = "";
  MatchResult m = match_accepted(l, p.afd);
  if (m.status != MatchStatus::matched) {
    p.why = m.why ? m.why : "not matched";
    return false;
  }
  p.acceptor = std::make_unique<Conn>(options(), p.acceptor_mode);
  if (p.acceptor->start_acceptor(m.handshake, &why) < 0) p.why = why;
  return true;
}

// Both directions carry exactly their connection's bytes, on shm.
void exchange(Pair& p, unsigned seed) {
  const std::string up = pattern(seed, 1000 + seed * 37), down = pattern(seed + 1000, 3000 + seed);
  REQUIRE(send_all(*p.connector, p.cfd, up) == ssize_t(up.size()));
  bool more = true;
  CHECK(recv_exact(*p.acceptor, p.afd, up.size(), more) == up);
  CHECK_FALSE(more);
  REQUIRE(send_all(*p.acceptor, p.afd, down) == ssize_t(down.size()));
  CHECK(recv_exact(*p.connector, p.cfd, down.size(), more) == down);
  CHECK_FALSE(more);
  CHECK(p.connector->phase() == Conn::Phase::active);
  CHECK(p.acceptor->phase() == Conn::Phase::active);
}

struct Counts {
  uint64_t fresh, reused, unpooled, retired, refused;
};
Counts counts() {
  const PoolCounters& c = pool_counters();
  return {c.fresh.load(), c.reused.load(), c.unpooled.load(), c.retired.load(), c.refused.load()};
}

struct Server {
  TcpServer tcp;
  Listener listener;
  bool open() {
    const char* why = "";
    return tcp_listen(tcp, "127.0.0.1") && listener.open(tcp.local, &why) == 0;
  }
};

}  // namespace

TEST_CASE("successive connections between two ends reuse one pooled segment, each with its "
          "exact bytes", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  const Counts before = counts();
  constexpr int kConnections = 6;
  for (int i = 0; i < kConnections; ++i) {
    Pair p;
    INFO("connection " << i);
    REQUIRE(open_pair(p, s.tcp, s.listener));
    REQUIRE(p.why.empty());
    exchange(p, unsigned(i));
  }
  const Counts after = counts();
  // Each end made one slot (the first connection), and every later connection reused it.
  CHECK(after.fresh - before.fresh == 2);
  CHECK(after.reused - before.reused == 2 * (kConnections - 1));
  CHECK(after.unpooled == before.unpooled);
  // One segment, mapped by each end: two mappings while the channel lives, none after.
  CHECK(mapped_segments().size() == 2);
  forget_channels();
  s.listener.close();
  CHECK(mapped_segments().empty());
}

TEST_CASE("a connection still open keeps its slot: the next one gets another", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  const Counts before = counts();
  Pair first, second;
  REQUIRE(open_pair(first, s.tcp, s.listener));
  exchange(first, 1);
  REQUIRE(open_pair(second, s.tcp, s.listener));
  exchange(second, 2);
  CHECK(counts().fresh - before.fresh == 4);
  CHECK(counts().reused == before.reused);
  first.end();
  second.end();
  forget_channels();
}

TEST_CASE("the acceptor refuses the reuse of a slot it still uses (a scribbled release mark): "
          "that connection stays on TCP", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  Pair held;
  REQUIRE(open_pair(held, s.tcp, s.listener));
  exchange(held, 1);
  // The connector's end goes; the acceptor keeps its connection open. A scribbler (the
  // peer) writes the release mark the acceptor has not written.
  held.connector->close();
  held.connector.reset();
  const std::vector<Layout*> maps = mapped_segments();
  REQUIRE(maps.size() == 2);
  maps[0]->side[1].released.store(kSlotReleased);
  const Counts before = counts();
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    CHECK(p.why == "the acceptor still uses the pooled segment");
    CHECK(counts().refused - before.refused == 1);
    // The connector learns it from the rejection: TCP, bytes intact.
    const std::string up = pattern(7, 500);
    CHECK(send_all(*p.connector, p.cfd, up) == ssize_t(up.size()));
    // (It reads the reply now and then, and in every wait.)
    for (int i = 0; i < 200 && p.connector->phase() != Conn::Phase::tcp; ++i)
      (void)p.connector->poll_now(p.cfd, POLLIN);
    CHECK(p.connector->phase() == Conn::Phase::tcp);
    CHECK(std::string(p.connector->fallback_reason()) ==
          "the acceptor still uses the pooled segment");
    char buf[600];
    ssize_t got = 0;
    while (got < ssize_t(up.size())) {
      const ssize_t n = recv(p.afd, buf + got, sizeof buf - size_t(got), 0);
      REQUIRE(n > 0);
      got += n;
    }
    CHECK(std::string(buf, size_t(got)) == up);
    p.acceptor.reset();  // (none: start_acceptor refused)
  }
  // The refused slot left the connector's pool; the next connection gets a fresh one.
  held.end();
  const Counts mid = counts();
  Pair next;
  REQUIRE(open_pair(next, s.tcp, s.listener));
  REQUIRE(next.why.empty());
  exchange(next, 9);
  CHECK(counts().fresh - mid.fresh == 2);
  next.end();
  forget_channels();
}

TEST_CASE("a connection another process accepted gives its reused slot back: the next one "
          "reuses it on the same channel", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  {
    Pair first;
    REQUIRE(open_pair(first, s.tcp, s.listener));
    exchange(first, 1);
  }
  const Counts before = counts();
  {
    // The hello reuses the slot, but the connection is accepted without a match (as by a
    // sibling worker of a pre-fork server, which never saw the hello) and answered on TCP.
    Pair p;
    REQUIRE(open_connector(p, s.tcp));
    const std::string down = pattern(3, 700);
    REQUIRE(write(p.afd, down.data(), down.size()) == ssize_t(down.size()));
    bool more = true;
    CHECK(recv_exact(*p.connector, p.cfd, down.size(), more) == down);
    CHECK(p.connector->phase() == Conn::Phase::tcp);
    CHECK(std::string(p.connector->fallback_reason()) ==
          "the acceptor sent on TCP without answering: its process had no hello "
          "(a listener shared after fork?)");
    CHECK(counts().reused - before.reused == 1);  // (the connector's pick)
  }
  // The withdrawal reaches the listener before the next hello on the same channel; the
  // slot was released on both sides as before, so the next connection reuses it.
  Pair next;
  REQUIRE(open_pair(next, s.tcp, s.listener));
  REQUIRE(next.why.empty());
  exchange(next, 5);
  CHECK(s.listener.counters().withdrawn == 1);
  CHECK(s.listener.counters().channels_opened == 1);
  CHECK(counts().fresh == before.fresh);
  CHECK(counts().retired == before.retired);
  CHECK(counts().reused - before.reused == 3);  // the withdrawn pick, then both ends
  next.end();
  forget_channels();
}

TEST_CASE("scribbles on an idle pooled slot: counters are reset, a garbage mark retires the "
          "slot; the next connection works on shm", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    exchange(p, 1);
  }
  std::vector<Layout*> maps = mapped_segments();
  REQUIRE(maps.size() == 2);
  // Ring counters, geometry-free garbage, arm flags, switch offsets: the reuse resets them.
  for (int d = 0; d < 2; ++d) {
    maps[0]->dir[d].producer.tail.store(0x1234567);
    maps[0]->dir[d].consumer.head.store(77);
    maps[0]->dir[d].producer.switch_offset.store(5);
    maps[0]->dir[d].control.state.store(99);
    maps[0]->side[d].arm_data.store(3);
  }
  Counts before = counts();
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    REQUIRE(p.why.empty());
    exchange(p, 2);
    CHECK(counts().reused - before.reused == 2);
  }
  // A mark that is neither in use, released nor retired: the connector drops the slot.
  maps = mapped_segments();
  REQUIRE(maps.size() == 2);
  maps[0]->side[1].released.store(0xdead);
  before = counts();
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    REQUIRE(p.why.empty());
    exchange(p, 3);
    CHECK(counts().retired - before.retired == 1);
    CHECK(counts().fresh - before.fresh == 2);
  }
  forget_channels();
}

TEST_CASE("a scribble on a pooled connection's ring breaks that connection only", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    exchange(p, 1);
    const std::vector<Layout*> maps = mapped_segments();
    REQUIRE(maps.size() == 2);
    maps[0]->dir[0].producer.tail.store(uint64_t(1) << 40);  // far beyond the window
    char buf[16];
    iovec v{buf, sizeof buf};
    CHECK(p.acceptor->recv(p.afd, &v, 1, MSG_DONTWAIT) == -ECONNRESET);
  }
  Pair next;
  REQUIRE(open_pair(next, s.tcp, s.listener));
  REQUIRE(next.why.empty());
  exchange(next, 2);
  next.end();
  forget_channels();
}

TEST_CASE("a ring that grew is not pooled", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  Counts before = counts();
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    // More than the initial window before the reader takes any: the ring grows.
    const std::string big = pattern(5, kDefaultInitialWindow * 3);
    REQUIRE(send_all(*p.connector, p.cfd, big) == ssize_t(big.size()));
    bool more = true;
    CHECK(recv_exact(*p.acceptor, p.afd, big.size(), more) == big);
  }
  CHECK(counts().retired - before.retired == 2);  // each end gave it up
  CHECK(mapped_segments().empty());
  before = counts();
  Pair next;
  REQUIRE(open_pair(next, s.tcp, s.listener));
  exchange(next, 6);
  CHECK(counts().fresh - before.fresh == 2);
  CHECK(counts().reused == before.reused);
  next.end();
  forget_channels();
}

TEST_CASE("a forked child never uses its parent's pooled slots; a connection open across a "
          "fork is not pooled", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    exchange(p, 1);
  }
  REQUIRE(mapped_segments().size() == 2);
  // The child connects to the parent's listener: a channel and a pool of its own, a fresh
  // slot; it never picks the parent's released one.
  const pid_t child = spawn([&] {
    const Counts c0 = counts();
    fastsock::SocketMode mode;
    Conn c(options(), mode);
    sockaddr_storage ss;
    const socklen_t len = to_sockaddr(s.tcp.local, ss);
    const char* why = "";
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c.prepare(fd, reinterpret_cast<sockaddr*>(&ss), len, &why) < 0) return 10;
    if (counts().fresh - c0.fresh != 1 || counts().reused != c0.reused) return 11;
    if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 12;
    if (c.start_connector(fd, &why) < 0) return 13;
    const std::string up = pattern(42, 800);
    if (send_all(c, fd, up) != ssize_t(up.size())) return 14;
    bool more = true;
    if (recv_exact(c, fd, 5, more) != "done!") return 15;
    c.close();
    close(fd);
    return 0;
  });
  const Counts before = counts();
  {
    Pair p;
    p.afd = accept4(s.tcp.fd, nullptr, nullptr, SOCK_CLOEXEC);
    MatchResult m = match_accepted(s.listener, p.afd);
    REQUIRE(m.status == MatchStatus::matched);
    CHECK(m.handshake.hello().slot_op == SlotOp::fresh);
    p.acceptor = std::make_unique<Conn>(options(), p.acceptor_mode);
    const char* why = "";
    REQUIRE(p.acceptor->start_acceptor(m.handshake, &why) == 0);
    bool more = true;
    CHECK(recv_exact(*p.acceptor, p.afd, 800, more) == pattern(42, 800));
    CHECK(send_all(*p.acceptor, p.afd, "done!") == 5);
  }
  CHECK(wait_exit(child) == 0);
  CHECK(counts().fresh - before.fresh == 1);  // the acceptor's slot for the child's channel
  // The parent's own slot is still there and still reusable.
  const Counts mid = counts();
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    exchange(p, 3);
    CHECK(counts().reused - mid.reused == 2);
    // Open across a fork: both ends give the slot up when it ends.
    const pid_t quiet = spawn([] { return 0; });
    CHECK(wait_exit(quiet) == 0);
  }
  CHECK(counts().retired - mid.retired == 2);
  const Counts end = counts();
  {
    Pair p;
    REQUIRE(open_pair(p, s.tcp, s.listener));
    exchange(p, 4);
    CHECK(counts().fresh - end.fresh == 2);
  }
  forget_channels();
}

TEST_CASE("a peer process that dies frees the pool: no segment stays mapped", "[pool]") {
  forget_channels();
  // An acceptor process serving 3 connections, then waiting to be killed.
  TcpServer server;
  REQUIRE(tcp_listen(server, "127.0.0.1"));
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t acceptor = spawn([&] {
    Listener l;
    const char* why = "";
    if (l.open(server.local, &why) != 0) return 10;
    if (write(ready[1], "r", 1) != 1) return 11;
    for (int i = 0; i < 3; ++i) {
      const int fd = accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
      MatchResult m = match_accepted(l, fd);
      if (m.status != MatchStatus::matched) return 12;
      fastsock::SocketMode mode;
      Conn c(options(), mode);
      if (c.start_acceptor(m.handshake, &why) < 0) return 13;
      bool more = true;
      const std::string got = recv_exact(c, fd, 100, more);
      if (got != pattern(unsigned(i), 100)) return 14;
      if (send_all(c, fd, got) != 100) return 15;
      c.close();
      close(fd);
    }
    pause();
    return 0;
  });
  char r;
  REQUIRE(read(ready[0], &r, 1) == 1);
  for (int i = 0; i < 3; ++i) {
    fastsock::SocketMode mode;
    Conn c(options(), mode);
    sockaddr_storage ss;
    const socklen_t len = to_sockaddr(server.local, ss);
    const char* why = "";
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(c.prepare(fd, reinterpret_cast<sockaddr*>(&ss), len, &why) == 0);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0);
    REQUIRE(c.start_connector(fd, &why) == 0);
    const std::string up = pattern(unsigned(i), 100);
    REQUIRE(send_all(c, fd, up) == 100);
    bool more = true;
    CHECK(recv_exact(c, fd, 100, more) == up);
    CHECK(c.phase() == Conn::Phase::active);
    c.close();
    close(fd);
  }
  // The pool holds its slots while the channel lives: one, or two when a connection began
  // before the acceptor had released the previous one.
  CHECK(mapped_segments().size() >= 1);
  CHECK(mapped_segments().size() <= 2);
  kill(acceptor, SIGKILL);
  CHECK(wait_exit(acceptor) == 1000 + SIGKILL);
  // The next connection to that destination finds the channel dead at its hello: it closes,
  // with its pool, and no record is found any more.
  Dialer d;
  CHECK(dial_hello(d, server.local, 1, nullptr, 0) == -ECONNREFUSED);
  CHECK(mapped_segments().empty());
  close(ready[0]);
  close(ready[1]);
  forget_channels();
}

TEST_CASE("a connector process that dies frees the acceptor's pool", "[pool]") {
  forget_channels();
  Server s;
  REQUIRE(s.open());
  const pid_t connector = spawn([&] {
    for (int i = 0; i < 3; ++i) {
      fastsock::SocketMode mode;
      Conn c(options(), mode);
      sockaddr_storage ss;
      const socklen_t len = to_sockaddr(s.tcp.local, ss);
      const char* why = "";
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (c.prepare(fd, reinterpret_cast<sockaddr*>(&ss), len, &why) < 0) return 10;
      if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 11;
      if (c.start_connector(fd, &why) < 0) return 12;
      bool more = true;
      if (recv_exact(c, fd, 3, more) != "bye") return 13;
      c.close();
      close(fd);
    }
    return 0;  // exits with its channel (and pool) open
  });
  for (int i = 0; i < 3; ++i) {
    const int fd = accept4(s.tcp.fd, nullptr, nullptr, SOCK_CLOEXEC);
    MatchResult m = match_accepted(s.listener, fd);
    REQUIRE(m.status == MatchStatus::matched);
    fastsock::SocketMode mode;
    Conn c(options(), mode);
    const char* why = "";
    REQUIRE(c.start_acceptor(m.handshake, &why) == 0);
    CHECK(send_all(c, fd, "bye") == 3);
    // Until the connector has read it: the slot is released only after both ends let go.
    char b;
    CHECK(recv(fd, &b, 1, 0) == 0);
    c.close();
    close(fd);
  }
  CHECK(wait_exit(connector) == 0);
  CHECK(mapped_segments().size() >= 1);
  CHECK(mapped_segments().size() <= 2);
  // The next match() sees the dead channel (a plain TCP peer: nothing to wait for).
  const int plain = tcp_connect(s.tcp.local);
  const int fd = accept4(s.tcp.fd, nullptr, nullptr, SOCK_CLOEXEC);
  CHECK(match_accepted(s.listener, fd).status == MatchStatus::not_fastsock);
  CHECK(s.listener.channels() == 0);
  CHECK(mapped_segments().empty());
  close(fd);
  close(plain);
}
