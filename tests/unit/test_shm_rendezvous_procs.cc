// The shm rendezvous between real processes: descriptors across processes, a hello that
// arrives during the bounded wait, concurrent connectors matched out of order, dialers that
// die, another uid [root] and another network namespace [netns].
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/un.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>
#include <memory>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "rendezvous_helpers.hpp"
#include "rendezvous_skip.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"

using namespace fastsock::shm;
using namespace rvtest;

namespace {

// What a connector child writes into the segment it passes: proves that the acceptor got
// that very memory file, from that very process.
std::string segment_text(pid_t pid, uint64_t cookie) {
  return "segment of " + std::to_string(pid) + " for socket " + std::to_string(cookie);
}

std::string read_segment(int fd) {
  char buf[128] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// A connector child: dial, hello with a memfd and an eventfd, TCP connect, (pause), where,
// wait for the reply, then signal the acceptor's eventfd and wait for its signal on ours.
// Exit code 0 on success, else the step that failed. With `where_sent` >= 0 it writes a
// byte there once its where is sent.
int connector_child(const Endpoint& dst, int pause_before_where_ms, int where_sent = -1) {
  Dialer d;
  const int tcp = tcp_socket(dst);
  if (tcp < 0) return 11;
  const uint64_t cookie = socket_cookie(tcp);
  const int seg = memfd_create("rv-child", MFD_CLOEXEC);
  const std::string text = segment_text(getpid(), cookie);
  if (write(seg, text.data(), text.size()) != ssize_t(text.size())) return 12;
  const int efd = eventfd(0, EFD_CLOEXEC);
  const int fds[2] = {seg, efd};
  const char* why = nullptr;
  if (dial_hello(d, dst, cookie, fds, 2) != 0) return 13;
  if (tcp_connect_fd(tcp, dst) < 0) return 11;
  if (pause_before_where_ms) usleep(unsigned(pause_before_where_ms) * 1000);
  if (d.send_where(local_of(tcp), &why) != 0) return 10;
  if (where_sent >= 0 && write(where_sent, "w", 1) != 1) return 19;
  if (!readable(d.fd(), 20000)) return 14;
  Reply reply;
  PassedFds got;
  if (d.poll_reply(reply, got, &why) != ReplyStatus::accepted) return 15;
  if (got.count() != 1) return 16;
  const uint64_t one = 1;
  if (write(got.get(0), &one, sizeof one) != sizeof one) return 17;
  if (read_counter(efd, 20000) != 2) return 18;
  close(tcp);
  return 0;
}

// The acceptor's half for one connection from a connector_child: match, check what the
// hello and its descriptors say, answer with an eventfd, and signal both ways. Returns the
// connector's pid.
pid_t accept_connector(Listener& listener, int accepted) {
  MatchResult m = match_accepted(listener, accepted);
  REQUIRE(m.status == MatchStatus::matched);
  const Hello h = m.handshake.hello();
  CHECK(h.server_port == local_of(accepted).port);
  REQUIRE(m.handshake.fds().count() == 2);
  // The acceptor keeps what it takes; the rest closes with the handshake.
  const int seg = m.handshake.fds().take(0);
  const int child_efd = m.handshake.fds().take(1);
  CHECK(read_segment(seg) == segment_text(h.pid, h.cookie));
  const int efd = eventfd(0, EFD_CLOEXEC);
  const char* why = nullptr;
  REQUIRE(m.handshake.accept(&efd, 1, &why) == 0);
  CHECK_FALSE(m.handshake.valid());
  CHECK(read_counter(efd, 20000) == 1);  // the child's signal
  const uint64_t two = 2;
  CHECK(write(child_efd, &two, sizeof two) == sizeof two);
  for (int fd : {seg, child_efd, efd}) close(fd);
  return h.pid;
}

}  // namespace

TEST_CASE("a connector process and an acceptor process exchange descriptors") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  warm_dialer();
  const int fds_before = count_fds();

  const pid_t child = spawn([&] { return connector_child(srv.local, 0); });
  REQUIRE(child > 0);
  const int accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  CHECK(accept_connector(listener, accepted) == child);
  CHECK(wait_exit(child) == 0);
  close(accepted);
  // The child's channel stayed open for its next connection; its exit closed it, which the
  // next look at the channels notices.
  CHECK(listener.channels() == 1);
  CHECK(listener.match(uint64_t(1)).status == MatchStatus::not_fastsock);
  CHECK(listener.counters().channels_closed == 1);
  CHECK(listener.channels() == 0);
  CHECK(count_fds() == fds_before);
}

TEST_CASE("a connector process accepted before its where is matched by its socket") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  // The child pauses 100 ms between its TCP connect and its `where`: the acceptor asks
  // sock_diag for the cookie of the child's socket (another process's).
  const pid_t child = spawn([&] { return connector_child(srv.local, 100); });
  const int accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  CHECK(accept_connector(listener, accepted) == child);
  CHECK(listener.counters().by_cookie == 1);
  CHECK(wait_exit(child) == 0);
  close(accepted);
}

// Whether this kernel answers NETLINK_SOCK_DIAG for TCP (CONFIG_INET_DIAG and
// CONFIG_INET_TCP_DIAG, modules inet_diag and tcp_diag on Debian): asks for the socket at
// the other end of a loopback connection.
static bool tcp_sock_diag_works() {
  TcpServer srv;
  if (!tcp_listen(srv, "127.0.0.1")) return true;
  const int c = tcp_connect(srv.local);
  const int a = c >= 0 ? accept(srv.fd, nullptr, nullptr) : -1;
  DiagSocket diag;
  uint64_t cookie = 0;
  const char* why = nullptr;
  const bool works = a >= 0 && diag.peer_cookie(peer_of(a), local_of(a), &cookie, &why) == 0;
  for (int fd : {c, a})
    if (fd >= 0) close(fd);
  return works;
}

// The verbs link keeps a pre-forking server's RDMA listener while a child still listens on
// the socket its parent closed (verbs_cm.cc, Listener::held): the lookup it relies on.
TEST_CASE("sock_diag tells whether a closed listening socket still listens in a child") {
  if (!tcp_sock_diag_works()) {
    rvskip::skip("this kernel does not answer NETLINK_SOCK_DIAG for TCP");
    return;
  }
  for (const char* addr : {"127.0.0.1", "0.0.0.0", "::"}) {
    if (addr[0] == ':' && !ipv6_loopback_up()) continue;
    INFO(addr);
    TcpServer srv;
    REQUIRE(tcp_listen(srv, addr));
    const uint64_t cookie = socket_cookie(srv.fd);
    REQUIRE(cookie != 0);
    DiagSocket diag;
    const char* why = nullptr;
    CHECK(diag.still_listening(srv.local, cookie, &why) == 1);
    CHECK(diag.still_listening(srv.local, cookie + 1, &why) == 0);  // another socket's
    int release[2];
    REQUIRE(pipe(release) == 0);
    const pid_t child = spawn([&] {  // holds the listening socket until told
      close(release[1]);
      char b;
      return read(release[0], &b, 1) == 0 ? 0 : 1;
    });
    REQUIRE(child > 0);
    close(release[0]);
    close(srv.fd);
    srv.fd = -1;
    CHECK(diag.still_listening(srv.local, cookie, &why) == 1);
    close(release[1]);
    CHECK(wait_exit(child) == 0);
    CHECK(diag.still_listening(srv.local, cookie, &why) == 0);
    // A new socket on the same port is not the old one.
    TcpServer again;
    REQUIRE(tcp_listen(again, addr, false, srv.local.port));
    CHECK(diag.still_listening(srv.local, cookie, &why) == 0);
    CHECK(diag.still_listening(srv.local, socket_cookie(again.fd), &why) == 1);
  }
}

// The kernel's part is real: the rdma suite's rdma_no_sock_diag runs this case in the VM
// after keeping the kernel from loading inet_diag (tests/rdma/no_sock_diag.sh).
TEST_CASE("without TCP sock_diag, a connector accepted before its where waits for it",
          "[nodiag]") {
  if (tcp_sock_diag_works()) {
    rvskip::skip("this kernel answers NETLINK_SOCK_DIAG for TCP (rdma_no_sock_diag runs this "
                 "case in a VM whose kernel does not)");
    return;
  }
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  int where_sent[2];
  REQUIRE(pipe(where_sent) == 0);
  {
    // Accepted while its where is 300 ms away: the acceptor waits for it. (The wait is
    // set to 5 s here, not the transport's 10 ms, so that the where comes after the
    // accept and within the wait on a slow, emulated machine too.)
    Listener listener;
    Listener::Options options;
    options.where_wait_ns = 5'000'000'000;
    const char* why = nullptr;
    REQUIRE(listener.open(srv.local, options, &why) == 0);
    const pid_t late = spawn([&] { return connector_child(srv.local, 300); });
    const int first = accept(srv.fd, nullptr, nullptr);
    REQUIRE(first >= 0);
    CHECK(accept_connector(listener, first) == late);
    CHECK(listener.counters().by_late_where == 1);
    CHECK(wait_exit(late) == 0);
    close(first);
  }
  pid_t early = -1;
  {
    Listener listener;
    const char* why = nullptr;
    REQUIRE(listener.open(srv.local, &why) == 0);
    // Accepted while its where is 300 ms away, with the default wait (10 ms): only
    // sock_diag could name it in time.
    early = spawn([&] { return connector_child(srv.local, 300); });
    const int accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(accepted >= 0);
    const MatchResult m = match_accepted(listener, accepted);
    CHECK(m.status == MatchStatus::not_fastsock);
    REQUIRE(m.why != nullptr);
    CHECK(std::string(m.why) ==
          "cannot identify the peer's socket: NETLINK_SOCK_DIAG for TCP unavailable");
    CHECK(listener.counters().by_cookie == 0);
    CHECK(listener.counters().by_late_where == 0);
    close(accepted);
    // One whose where came before the acceptor looked is matched by it, as always.
    const pid_t child = spawn([&] { return connector_child(srv.local, 0, where_sent[1]); });
    REQUIRE(readable(where_sent[0], 20000));
    const int next = accept(srv.fd, nullptr, nullptr);
    REQUIRE(next >= 0);
    CHECK(accept_connector(listener, next) == child);
    CHECK(wait_exit(child) == 0);
    close(next);
  }
  // Nobody accepted the early connector: the listener's end closed its channel, before its
  // where could be sent (10) or while it waited for an answer (15).
  const int early_rc = wait_exit(early);
  CHECK((early_rc == 10 || early_rc == 15));
  close(where_sent[0]);
  close(where_sent[1]);
}

TEST_CASE("concurrent connectors are matched in any order") {
  constexpr int kChildren = 8;
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i)
    children.push_back(spawn([&] { return connector_child(srv.local, 0); }));
  std::vector<int> accepted;
  for (int i = 0; i < kChildren; ++i) {
    accepted.push_back(accept(srv.fd, nullptr, nullptr));
    REQUIRE(accepted.back() >= 0);
  }
  // Matched last-accepted first, so the table holds the others' hellos meanwhile.
  std::vector<pid_t> seen;
  for (int i = kChildren - 1; i >= 0; --i) {
    seen.push_back(accept_connector(listener, accepted[size_t(i)]));
  }
  for (pid_t c : children) {
    CHECK(std::count(seen.begin(), seen.end(), c) == 1);
    CHECK(wait_exit(c) == 0);
  }
  for (int fd : accepted) close(fd);
  CHECK(listener.counters().matched == kChildren);
  CHECK(listener.pending() == 0);
}

// One connection of this process to `srv` through `listener`, both ends here. Returns the
// channel's descriptor the dialer used (-1 on failure).
int connect_here(TcpServer& srv, Listener& listener) {
  Dialer d;
  if (dial(d, srv.local) != 0) return -1;
  const int chan = d.fd();
  const int tcp = handshake_connect(d, srv.local, nullptr, 0);
  const int accepted = accept(srv.fd, nullptr, nullptr);
  const char* why = nullptr;
  int rc = -1;
  if (tcp >= 0 && accepted >= 0) {
    MatchResult m = match_accepted(listener, accepted);
    Reply reply;
    PassedFds got;
    if (m.status == MatchStatus::matched && m.handshake.hello().pid == getpid() &&
        m.handshake.accept(nullptr, 0, &why) == 0 &&
        d.poll_reply(reply, got, &why) == ReplyStatus::accepted)
      rc = chan;
  }
  if (tcp >= 0) close(tcp);
  if (accepted >= 0) close(accepted);
  return rc;
}

TEST_CASE("a connector process keeps one channel for its successive connections") {
  constexpr int kChildren = 2, kEach = 5;
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  // Two client processes, each connecting kEach times in a row, at the same time.
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i) {
    children.push_back(spawn([&] {
      for (int k = 0; k < kEach; ++k)
        if (const int rc = connector_child(srv.local, 0); rc != 0) return rc;
      return 0;
    }));
  }
  std::vector<pid_t> seen;
  for (int i = 0; i < kChildren * kEach; ++i) {
    const int accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(accepted >= 0);
    seen.push_back(accept_connector(listener, accepted));
    close(accepted);
  }
  for (pid_t c : children) {
    CHECK(std::count(seen.begin(), seen.end(), c) == kEach);
    CHECK(wait_exit(c) == 0);
  }
  CHECK(listener.counters().matched == uint64_t(kChildren * kEach));
  // One channel per process, whatever the number of connections.
  CHECK(listener.counters().channels_opened == uint64_t(kChildren));
}

TEST_CASE("threads of one process handshaking at once never get each other's reply") {
  constexpr int kThreads = 6, kEach = 5;
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  forget_channels();
  // Each connector thread: dial, hello, connect, where, then wait for its reply, which names
  // the connector's own port (the acceptor rejects with that text). A reply read on a
  // channel shared with another handshake would name another port, or fail the nonce check.
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < kEach; ++k) {
        Dialer d;
        const char* w = nullptr;
        const int tcp = dial(d, srv.local) == 0 ? handshake_connect(d, srv.local, nullptr, 0) : -1;
        const Endpoint local = tcp >= 0 ? local_of(tcp) : Endpoint{};
        Reply reply;
        PassedFds got;
        if (tcp < 0 || !readable(d.fd(), 20000) ||
            d.poll_reply(reply, got, &w) != ReplyStatus::rejected ||
            std::string(reply.reason) != std::to_string(local.port))
          ++wrong;
        if (tcp >= 0) close(tcp);
        ++done;
      }
    });
  }
  for (int i = 0; i < kThreads * kEach; ++i) {
    const int accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(accepted >= 0);
    const Endpoint peer = peer_of(accepted);
    MatchResult m = match_accepted(listener, accepted);
    REQUIRE(m.status == MatchStatus::matched);
    CHECK(m.handshake.reject(std::to_string(peer.port).c_str(), &why) == 0);
    close(accepted);
  }
  for (std::thread& t : threads) t.join();
  CHECK(done == kThreads * kEach);
  CHECK(wrong == 0);
  CHECK(listener.counters().matched == uint64_t(kThreads * kEach));
  // At most one channel per handshake under way at once, never one per connection.
  CHECK(listener.counters().channels_opened <= uint64_t(kThreads));
  CHECK(channels::idle_count() <= channels::kMaxIdlePerDestination);
  forget_channels();
}

TEST_CASE("a forked child never uses its parent's channel") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  forget_channels();
  const int chan = connect_here(srv, listener);
  REQUIRE(chan >= 0);
  REQUIRE(channels::idle_count() == 1);
  const pid_t child = spawn([&] {
    // The inherited copy was closed at the fork, before anything ran in the child.
    if (channels::idle_count() != 0) return 20;
    if (fcntl(chan, F_GETFD) != -1 || errno != EBADF) return 21;
    return connector_child(srv.local, 0);  // on a channel of its own
  });
  const int accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  CHECK(accept_connector(listener, accepted) == child);
  close(accepted);
  CHECK(wait_exit(child) == 0);
  CHECK(listener.counters().channels_opened == 2);
  // The parent's channel still works, and is the one it uses.
  CHECK(connect_here(srv, listener) == chan);
  CHECK(listener.counters().channels_opened == 2);
  forget_channels();
}

TEST_CASE("an idle channel the application closed is forgotten, never written to") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  forget_channels();
  const int chan = connect_here(srv, listener);
  REQUIRE(chan >= 0);
  REQUIRE(channels::idle_count() == 1);
  // What the preload library's close() hook does when the application closes that number.
  REQUIRE(close(chan) == 0);
  channels::forget_range(unsigned(chan), unsigned(chan));
  CHECK(channels::idle_count() == 0);
  // The number comes back as the application's own socket (the library's numbers are
  // above the kernel's next ones, internal_fds::take: dup2 puts it there); a dial must not
  // touch it. Where the library's numbers are above the soft limit (room below the hard
  // one, internal_fds.hpp), the application can have that number only once it raised its
  // limit past it, as here.
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  if (rlim_t(chan) >= saved.rlim_cur) {
    rlimit raised = saved;
    raised.rlim_cur = rlim_t(chan) + 1;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &raised) == 0);
  }
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  REQUIRE(dup3(pair[0], chan, O_CLOEXEC) == chan);
  close(pair[0]);
  pair[0] = chan;
  Dialer d;
  REQUIRE(dial(d, srv.local) == 0);
  CHECK(d.fd() != pair[0]);
  CHECK(d.fd() != pair[1]);
  CHECK_FALSE(readable(pair[0], 0));
  CHECK_FALSE(readable(pair[1], 0));
  d.close();
  close(pair[0]);
  close(pair[1]);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
}

TEST_CASE("a forked acceptor reads only the channels it accepted itself") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  forget_channels();
  const int chan = connect_here(srv, listener);  // an idle channel in the parent's table
  REQUIRE(chan >= 0);
  REQUIRE(listener.channels() == 1);
  // A worker process accepting on the inherited socket and record (pre-fork servers).
  const pid_t worker = spawn([&] {
    const int accepted = accept(srv.fd, nullptr, nullptr);
    if (accepted < 0) return 40;
    MatchResult m = match_accepted(listener, accepted);
    if (m.status != MatchStatus::matched) return 41;
    if (listener.channels() != 1) return 42;  // its own; the parent's copy was closed
    // The connector_child protocol: signals both ways over the exchanged eventfds.
    const int seg = m.handshake.fds().take(0);
    const int child_efd = m.handshake.fds().take(1);
    const int efd = eventfd(0, EFD_CLOEXEC);
    const char* w = nullptr;
    if (seg < 0 || child_efd < 0 || m.handshake.accept(&efd, 1, &w) != 0) return 43;
    if (read_counter(efd, 20000) != 1) return 44;
    const uint64_t two = 2;
    if (write(child_efd, &two, sizeof two) != sizeof two) return 45;
    return 0;
  });
  const pid_t connector = spawn([&] { return connector_child(srv.local, 0); });
  CHECK(wait_exit(connector) == 0);
  CHECK(wait_exit(worker) == 0);
  // The parent's table and channel are untouched: its next connection uses the same one.
  CHECK(connect_here(srv, listener) == chan);
  CHECK(listener.counters().channels_opened == 1);
  forget_channels();
}

TEST_CASE("a forked acceptor says when a connector's hello went to another process") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  forget_channels();
  Dialer d;
  REQUIRE(dial(d, srv.local) == 0);
  const int tcp = tcp_socket(srv.local);
  REQUIRE(tcp >= 0);
  REQUIRE(d.send_hello(socket_cookie(tcp), nullptr, 0, &why) == 0);
  // The parent (as one worker of a pre-fork server) accepts another connection and reads
  // the hello into its table meanwhile.
  const int plain = tcp_connect(srv.local);
  const int plain_accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(plain_accepted >= 0);
  MatchResult m = match_accepted(listener, plain_accepted);
  CHECK(m.status == MatchStatus::not_fastsock);
  CHECK(std::string(m.why) == "no fastsock dialer for this connection");
  REQUIRE(listener.pending() == 1);
  // The hello's connection is accepted by a forked worker, which has no hello for it.
  REQUIRE(tcp_connect_fd(tcp, srv.local) == tcp);
  const pid_t worker = spawn([&] {
    const int accepted = accept(srv.fd, nullptr, nullptr);
    if (accepted < 0) return 40;
    MatchResult w = match_accepted(listener, accepted);
    if (w.status != MatchStatus::not_fastsock) return 41;
    const std::string want = "no fastsock dialer's hello reached this process "
                             "(the listener is shared after fork)";
    return w.why && want == w.why ? 0 : 42;
  });
  CHECK(wait_exit(worker) == 0);
  CHECK(listener.pending() == 1);
  d.close();
  for (int fd : {tcp, plain, plain_accepted}) close(fd);
  forget_channels();
}

TEST_CASE("a connector withdraws a hello that a sibling's accept left unanswered") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  forget_channels();
  Dialer d;
  REQUIRE(dial(d, srv.local) == 0);
  // The hello reaches the parent, one worker of a pre-fork server, which reads it into its
  // table while it accepts another connection...
  const int tcp = tcp_socket(srv.local);
  REQUIRE(tcp >= 0);
  REQUIRE(d.send_hello(socket_cookie(tcp), nullptr, 0, &why) == 0);
  const int plain = tcp_connect(srv.local);
  const int plain_accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(plain_accepted >= 0);
  MatchResult m = match_accepted(listener, plain_accepted);
  CHECK(m.status == MatchStatus::not_fastsock);
  REQUIRE(listener.pending() == 1);
  REQUIRE(tcp_connect_fd(tcp, srv.local) == tcp);
  REQUIRE(d.send_where(local_of(tcp), &why) == 0);
  // ... while a forked worker accepts the hello's connection and answers on TCP.
  const pid_t worker = spawn([&] {
    const int accepted = accept(srv.fd, nullptr, nullptr);
    if (accepted < 0) return 40;
    if (match_accepted(listener, accepted).status != MatchStatus::not_fastsock) return 41;
    return write(accepted, "x", 1) == 1 ? 0 : 42;
  });
  CHECK(wait_exit(worker) == 0);
  // The connector saw bytes on TCP before any answer: it withdraws the hello.
  REQUIRE(d.withdraw());
  CHECK(d.fd() == -1);
  CHECK(channels::idle_count() == 1);
  // The parent drops the hello at its next look, and the kept channel carries the next
  // connection's hello, matched at once.
  Dialer d2;
  REQUIRE(dial(d2, srv.local) == 0);
  const int tcp2 = handshake_connect(d2, srv.local, nullptr, 0);
  REQUIRE(tcp2 >= 0);
  const int accepted2 = accept(srv.fd, nullptr, nullptr);
  REQUIRE(accepted2 >= 0);
  MatchResult m2 = match_accepted(listener, accepted2);
  CHECK(m2.status == MatchStatus::matched);
  CHECK(listener.counters().withdrawn == 1);
  CHECK(listener.counters().channels_opened == 1);  // the same channel
  CHECK(listener.counters().dropped_closed == 0);
  CHECK(listener.pending() == 0);
  if (m2.status == MatchStatus::matched) REQUIRE(m2.handshake.reject("test", &why) == 0);

  SECTION("a withdrawal that names another hello is not our protocol") {
    Dialer d3;
    REQUIRE(dial(d3, srv.local) == 0);
    const int tcp3 = tcp_socket(srv.local);
    REQUIRE(d3.send_hello(socket_cookie(tcp3), nullptr, 0, &why) == 0);
    // A raw withdrawal with the right cookie but a nonce of no hello of this channel.
    const WithdrawWire bad = encode_withdraw(Withdraw{d3.nonce() + 1, socket_cookie(tcp3)});
    REQUIRE(send(d3.fd(), &bad, sizeof bad, 0) == ssize_t(sizeof bad));
    const int plain3 = tcp_connect(srv.local);
    const int plain3_accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(plain3_accepted >= 0);
    CHECK(match_accepted(listener, plain3_accepted).status == MatchStatus::not_fastsock);
    CHECK(listener.counters().dropped_malformed == 1);
    CHECK(listener.counters().withdrawn == 1);
    CHECK(listener.pending() == 0);
    d3.close();
    for (int fd : {tcp3, plain3, plain3_accepted}) close(fd);
  }
  d2.close();
  for (int fd : {tcp, plain, plain_accepted, tcp2, accepted2}) close(fd);
  forget_channels();
}

TEST_CASE("a listener restarted while a client process keeps its channel") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  // The child is made before any record exists: a fork would copy the record's socket,
  // and the name would live on in the child.
  int go[2];
  REQUIRE(pipe(go) == 0);
  const pid_t child = spawn([&] {
    close(go[1]);
    char x;
    if (read(go[0], &x, 1) != 1) return 30;
    if (const int rc = connector_child(srv.local, 0); rc != 0) return rc;
    if (read(go[0], &x, 1) != 1) return 31;
    // Its idle channel went with the old record: the dial notices and makes a new one.
    return connector_child(srv.local, 0);
  });
  close(go[0]);
  auto listener = std::make_unique<Listener>();
  const char* why = nullptr;
  REQUIRE(listener->open(srv.local, &why) == 0);
  REQUIRE(write(go[1], "x", 1) == 1);
  int accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  CHECK(accept_connector(*listener, accepted) == child);
  close(accepted);
  listener.reset();  // the old one closes: a restart
  listener = std::make_unique<Listener>();
  REQUIRE(listener->open(srv.local, &why) == 0);
  REQUIRE(write(go[1], "x", 1) == 1);
  accepted = accept(srv.fd, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  CHECK(accept_connector(*listener, accepted) == child);
  close(accepted);
  CHECK(wait_exit(child) == 0);
  CHECK(listener->counters().channels_opened == 1);
  close(go[1]);

  SECTION("a listener gone before the hello: the kept channel is dropped, none is left") {
    forget_channels();
    REQUIRE(connect_here(srv, *listener) >= 0);  // a channel kept idle
    Dialer d;
    REQUIRE(dial(d, srv.local) == 0);             // takes it
    listener->close();
    CHECK(d.send_hello(55000, nullptr, 0, &why) == -ESTALE);
    CHECK(std::string(why) == "the kept rendezvous channel was closed by its listener");
    CHECK(d.fd() == -1);
    CHECK(channels::idle_count() == 0);
    CHECK(dial(d, srv.local) == -ECONNREFUSED);   // and nothing stale is used later
  }
}

TEST_CASE("a dialer that dies leaves no entry and no descriptor behind") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  warm_dialer();
  const int fds_before = count_fds();

  SECTION("before its hello") {
    const pid_t child = spawn([&] {
      Dialer d;
      if (dial(d, srv.local) != 0) return 10;
      return tcp_connect(srv.local) >= 0 ? 0 : 11;  // exits without a hello
    });
    CHECK(wait_exit(child) == 0);
    const int accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(accepted >= 0);
    MatchResult m = match_accepted(listener, accepted);
    CHECK(m.status == MatchStatus::not_fastsock);
    CHECK(listener.counters().channels_closed == 1);
    close(accepted);
  }
  SECTION("after its hello, before the acceptor answers") {
    const pid_t child = spawn([&] {
      Dialer d;
      if (dial(d, srv.local) != 0) return 10;
      const int seg = memfd_create("rv-dead", MFD_CLOEXEC);
      const int efd = eventfd(0, EFD_CLOEXEC);
      const int fds[2] = {seg, efd};
      return handshake_connect(d, srv.local, fds, 2) >= 0 ? 0 : 11;
    });
    CHECK(wait_exit(child) == 0);
    const int accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(accepted >= 0);
    {
      // Its hello and where are read (nothing after a where is, before the reply): matched,
      // and the reply finds it gone, so the connection stays on TCP.
      MatchResult m = match_accepted(listener, accepted);
      REQUIRE(m.status == MatchStatus::matched);
      CHECK(m.handshake.fds().count() == 2);
      const int efd = eventfd(0, EFD_CLOEXEC);
      CHECK(m.handshake.accept(&efd, 1, &why) == -EPIPE);
      close(efd);
    }
    close(accepted);
  }
  SECTION("after its hello, while its connection waits to be accepted") {
    const pid_t child = spawn([&] {
      Dialer d;
      if (dial(d, srv.local) != 0) return 10;
      const int seg = memfd_create("rv-dead", MFD_CLOEXEC);
      return handshake_connect(d, srv.local, &seg, 1) >= 0 ? 0 : 11;
    });
    CHECK(wait_exit(child) == 0);
    // Another connection is matched first: the dead dialer's hello goes into the table...
    const int plain = tcp_connect(srv.local);
    REQUIRE(plain >= 0);
    const int first = accept(srv.fd, nullptr, nullptr);
    const int second = accept(srv.fd, nullptr, nullptr);
    REQUIRE(second >= 0);
    const int plain_accepted = peer_of(first).port == local_of(plain).port ? first : second;
    CHECK(match_accepted(listener, plain_accepted).status == MatchStatus::not_fastsock);
    CHECK(listener.pending() == 1);
    // ...and leaves it with its descriptors when the listener closes.
    listener.close();
    close(first);
    close(second);
    close(plain);
    // The record, its presence socket, epoll set and sock_diag socket too.
    CHECK(count_fds() == fds_before - 4);
  }
  if (listener.fd() >= 0) CHECK(count_fds() == fds_before);
}

TEST_CASE("another uid is refused in both directions", "[root]") {
  if (geteuid() != 0) {
    rvskip::skip("needs root to run a child as another uid");
    return;
  }
  constexpr uid_t kNobody = 65534;
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  const char* why = nullptr;

  SECTION("the acceptor drops a hello from another uid") {
    Listener listener;
    REQUIRE(listener.open(srv.local, &why) == 0);
    const uid_t my_uid = geteuid();
    const pid_t child = spawn([&] {
      if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return 10;
      // Bypasses Dialer (whose name would carry the child's uid) to reach our record.
      sockaddr_un a;
      const socklen_t len = record_address(my_uid, srv.local, Stack::dual, a);
      const int raw = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
      if (connect(raw, reinterpret_cast<sockaddr*>(&a), len) != 0) return 11;
      const int tcp = tcp_socket(srv.local);
      Hello h;
      h.pid = getpid();
      h.cookie = socket_cookie(tcp);
      h.server_port = srv.local.port;
      const HelloWire w = encode_hello(h);
      if (send_message(raw, &w, sizeof w, nullptr, 0) != 0) return 13;
      if (tcp_connect_fd(tcp, srv.local) < 0) return 12;
      return readable(raw, 20000) ? 0 : 14;  // wait until the acceptor hung up
    });
    const int accepted = accept(srv.fd, nullptr, nullptr);
    REQUIRE(accepted >= 0);
    MatchResult m = match_accepted(listener, accepted);
    CHECK(m.status == MatchStatus::not_fastsock);
    CHECK(listener.counters().dropped_uid == 1);
    CHECK(wait_exit(child) == 0);
    close(accepted);
  }
  SECTION("the connector sends nothing to a record held by another uid") {
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const uint16_t port = srv.local.port;
    const pid_t child = spawn([&] {
      if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return 10;
      // Squats the name a root connector would try first.
      sockaddr_un a;
      const socklen_t len = record_address(0, ep("127.0.0.1", port), Stack::dual, a);
      int presence = -1;
      const int rec = bind_fake_record(a, len, 4, presence);
      if (rec < 0) return 11;
      if (write(ready[1], "x", 1) != 1) return 12;
      const int conn = accept(rec, nullptr, nullptr);
      if (conn < 0) return 13;
      char buf[256];
      // The root connector must hang up without sending its hello.
      return recv(conn, buf, sizeof buf, 0) == 0 ? 0 : 14;
    });
    close(ready[1]);  // so that a child that failed early ends our read
    char x;
    REQUIRE(read(ready[0], &x, 1) == 1);
    Dialer d;
    sockaddr_storage ss;
    const socklen_t len = to_sockaddr(srv.local, ss);
    CHECK(d.dial(reinterpret_cast<sockaddr*>(&ss), len, &why) == -EPERM);
    CHECK(std::string(why) == "rendezvous record belongs to another uid");
    CHECK(d.fd() == -1);
    CHECK(wait_exit(child) == 0);
    close(ready[0]);
  }
}

TEST_CASE("records are not visible from another network namespace", "[netns]") {
  TcpServer srv;
  REQUIRE(tcp_listen(srv, "127.0.0.1"));
  Listener listener;
  const char* why = nullptr;
  REQUIRE(listener.open(srv.local, &why) == 0);
  Dialer here;
  REQUIRE(dial(here, srv.local) == 0);  // visible in our own namespace
  here.close();

  int ready[2], done[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(done) == 0);
  const Endpoint theirs = ep("127.0.0.1", 40170);
  const pid_t child = spawn([&] {
    if (unshare(CLONE_NEWNET) != 0) return 77;
    Dialer d;
    const int rc = dial(d, srv.local);  // our record, from their namespace
    Listener l;
    const char* w = nullptr;
    if (l.open(theirs, &w) != 0) return 10;
    if (write(ready[1], rc == -ECONNREFUSED ? "y" : "n", 1) != 1) return 11;
    char x;
    return read(done[0], &x, 1) == 1 ? 0 : 12;  // keep the record until the parent looked
  });
  close(ready[1]);  // so that a child that failed early ends our read
  close(done[0]);
  char seen = 0;
  const bool child_ready = read(ready[0], &seen, 1) == 1;
  if (!child_ready) {
    const int rc = wait_exit(child);
    if (rc == 77) {
      close(ready[0]);
      close(done[1]);
      rvskip::skip("unshare(CLONE_NEWNET) not permitted here");
      return;
    }
    FAIL("the namespace child failed with " << rc);
  }
  CHECK(seen == 'y');  // the child did not find our record
  Dialer d;
  CHECK(dial(d, theirs) == -ECONNREFUSED);  // nor we the child's
  CHECK(write(done[1], "x", 1) == 1);
  CHECK(wait_exit(child) == 0);
  close(ready[0]);
  close(done[1]);
}

namespace {

bool write_text(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  close(fd);
  return ok;
}

// Whether `addr` becomes usable within 5 s (polled every millisecond): a route leads to it
// and it is the source address towards itself.
bool wait_until_usable(const in6_addr& addr) {
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  to.sin6_addr = addr;
  to.sin6_port = htons(9);
  for (int tries = 0; tries < 5000; ++tries) {
    const int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return false;
    sockaddr_in6 from{};
    socklen_t from_len = sizeof from;
    const bool usable = connect(s, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0 &&
                        getsockname(s, reinterpret_cast<sockaddr*>(&from), &from_len) == 0 &&
                        memcmp(&from.sin6_addr, &addr, sizeof addr) == 0;
    close(s);
    if (usable) return true;
    usleep(1000);
  }
  return false;
}

// This (child) process in a network namespace of its own (a user namespace too when a
// plain one is not permitted): lo up, 10.123.0.1/32 and, if `v6` is not null and it works,
// fd00:123::1/128 on it (*v6 says whether). 0, or 77 when no namespace can be made, or the
// failed step.
int own_netns_with_addresses(bool* v6) {
  if (unshare(CLONE_NEWNET) != 0) {
    const uid_t uid = geteuid();
    const gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return 77;
    write_text("/proc/self/setgroups", "deny");
    if (!write_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
      return 77;
  }
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return 20;
  ifr.ifr_flags = short(ifr.ifr_flags | IFF_UP);
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return 21;
  ifreq alias{};
  strcpy(alias.ifr_name, "lo:1");  // a second address, as ifconfig's aliases
  auto* sin = reinterpret_cast<sockaddr_in*>(&alias.ifr_addr);
  sin->sin_family = AF_INET;
  inet_pton(AF_INET, "10.123.0.1", &sin->sin_addr);
  if (ioctl(s, SIOCSIFADDR, &alias) != 0) return 22;
  inet_pton(AF_INET, "255.255.255.255", &sin->sin_addr);  // no route to its neighbours
  if (ioctl(s, SIOCSIFNETMASK, &alias) != 0) return 23;
  close(s);
  if (v6) {
    struct {  // struct in6_ifreq of <linux/ipv6.h>
      in6_addr addr;
      uint32_t prefixlen;
      int ifindex;
    } r{};
    inet_pton(AF_INET6, "fd00:123::1", &r.addr);
    r.prefixlen = 128;
    r.ifindex = int(if_nametoindex("lo"));
    const int s6 = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    *v6 = s6 >= 0 && r.ifindex > 0 && ioctl(s6, SIOCSIFADDR, &r) == 0;
    if (s6 >= 0) close(s6);
    // The address is tentative until the kernel's duplicate address detection work has run
    // (asynchronously, even on lo): until then no route leads to it and it is no source
    // address, so a dial would rightly find it not local. Wait for it to become usable.
    if (*v6 && !wait_until_usable(r.addr)) return 24;
  }
  return 0;
}

}  // namespace

TEST_CASE("a non-loopback address of this host finds the wildcard records, no other does",
          "[netns]") {
  // In a namespace of a child's own: records (no TCP listener needed, dial sends nothing
  // on the network) and dials from there, written back as "case|rc|why" lines.
  int out[2];
  REQUIRE(pipe(out) == 0);
  const pid_t child = spawn([&] {
    close(out[0]);
    bool v6 = false;
    if (const int rc = own_netns_with_addresses(&v6); rc != 0) return rc;
    std::string lines = v6 ? "" : "no-ipv6||\n";
    auto try_dial = [&](const char* name, const char* addr, uint16_t port, int family = 0) {
      Dialer d;
      sockaddr_storage ss;
      const socklen_t len = to_sockaddr(ep(addr, port), ss, family);
      const char* why = "";
      const int rc = d.dial(reinterpret_cast<sockaddr*>(&ss), len, &why);
      lines += std::string(name) + "|" + std::to_string(rc) + "|" + (rc == 0 ? "" : why) + "\n";
    };
    const char* why = nullptr;
    {
      Listener l;  // 0.0.0.0
      if (l.open(ep("0.0.0.0", 40191), &why) != 0) return 30;
      try_dial("v4wild-own", "10.123.0.1", 40191);
      try_dial("v4wild-own-mapped", "10.123.0.1", 40191, AF_INET6);
      try_dial("v4wild-unrouted", "10.123.0.9", 40191);
      try_dial("v4wild-dst-wildcard", "0.0.0.0", 40191);  // its exact record
      if (v6) try_dial("v4wild-own-v6", "fd00:123::1", 40191);
    }
    if (v6) {
      Listener l;  // [::] dual-stack
      if (l.open(ep("::", 40192), &why) != 0) return 31;
      try_dial("dual-own", "10.123.0.1", 40192);
      try_dial("dual-own-mapped", "10.123.0.1", 40192, AF_INET6);
      try_dial("dual-own-v6", "fd00:123::1", 40192);
      try_dial("dual-dst-v4wildcard", "0.0.0.0", 40192);  // exact record only: none
    }
    if (v6) {
      Listener l;  // [::] IPv6-only
      Listener::Options opt;
      opt.v6only = true;
      if (l.open(ep("::", 40193), opt, &why) != 0) return 32;
      try_dial("v6only-own", "10.123.0.1", 40193);
      try_dial("v6only-own-mapped", "10.123.0.1", 40193, AF_INET6);
      try_dial("v6only-own-v6", "fd00:123::1", 40193);
    }
    {
      Listener l;  // loopback only
      if (l.open(ep("127.0.0.1", 40194), &why) != 0) return 33;
      try_dial("loonly-own", "10.123.0.1", 40194);
      try_dial("loonly-lo", "127.0.0.1", 40194);
    }
    {
      // A whole connection: the acceptor matches the peer as its TCP accept names it.
      TcpServer srv;
      if (!tcp_listen(srv, "0.0.0.0")) return 34;
      Listener l;
      if (l.open(srv.local, &why) != 0) return 35;
      const Endpoint dst = ep("10.123.0.1", srv.local.port);
      Dialer d;
      int rc = dial(d, dst);
      // Without a `where`: matched through sock_diag, inside this namespace.
      const int tcp = rc == 0 ? handshake_connect(d, dst, nullptr, 0, 0, false) : -1;
      if (rc == 0 && tcp < 0) rc = -1000;
      const int accepted = rc == 0 ? accept(srv.fd, nullptr, nullptr) : -1;
      if (rc == 0 && accepted < 0) rc = -1002;
      if (rc == 0) {
        const Endpoint peer = peer_of(accepted);
        if (text(peer).rfind("10.123.0.1:", 0) != 0) rc = -1003;
        else if (match_accepted(l, accepted).status != MatchStatus::matched) rc = -1004;
      }
      lines += "tcp-match|" + std::to_string(rc) + "|\n";
      if (tcp >= 0) close(tcp);
      if (accepted >= 0) close(accepted);
    }
    const bool ok = write(out[1], lines.data(), lines.size()) == ssize_t(lines.size());
    close(out[1]);
    return ok ? 0 : 40;
  });
  close(out[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  close(out[0]);
  const int rc = wait_exit(child);
  if (rc == 77) {
    rvskip::skip("no network namespace can be made here (unshare: not permitted)");
    return;
  }
  REQUIRE(rc == 0);
  INFO("child's results:\n" << got);
  std::map<std::string, std::pair<int, std::string>> res;
  for (size_t pos = 0; pos < got.size();) {
    const size_t end = got.find('\n', pos);
    const std::string line = got.substr(pos, end - pos);
    pos = end + 1;
    const size_t a = line.find('|'), b = line.find('|', a + 1);
    res[line.substr(0, a)] = {line.substr(a + 1, b - a - 1).empty()
                                  ? 0
                                  : std::stoi(line.substr(a + 1, b - a - 1)),
                              line.substr(b + 1)};
  }
  const std::string no_listener = "no fastsock listener for this destination and this euid";
  const std::string not_ours =
      "destination is not an address of this host (its wildcard records do not apply)";
  auto expect = [&](const std::string& name, int rc_want, const std::string& why_want = "") {
    INFO("case " << name);
    REQUIRE(res.count(name) == 1);
    CHECK(res[name].first == rc_want);
    CHECK(res[name].second == why_want);
  };
  expect("v4wild-own", 0);
  expect("v4wild-own-mapped", 0);
  expect("v4wild-unrouted", -ECONNREFUSED, not_ours);  // 10.123.0.9: not this host's
  expect("v4wild-dst-wildcard", 0);
  expect("loonly-own", -ECONNREFUSED, no_listener);  // no false match
  expect("loonly-lo", 0);
  expect("tcp-match", 0);
  if (res.count("no-ipv6")) {
    WARN("IPv6 could not be set up in the namespace: only the IPv4 cases ran");
    return;
  }
  expect("v4wild-own-v6", -ECONNREFUSED, no_listener);  // 0.0.0.0 takes no IPv6
  expect("dual-own", 0);
  expect("dual-own-mapped", 0);
  expect("dual-own-v6", 0);
  expect("dual-dst-v4wildcard", -ECONNREFUSED, no_listener);
  expect("v6only-own", -ECONNREFUSED, no_listener);  // an IPv6-only listener gets no IPv4
  expect("v6only-own-mapped", -ECONNREFUSED, no_listener);
  expect("v6only-own-v6", 0);
}

TEST_CASE("a record vanishes with its process, however it ends") {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const Endpoint record = ep("127.0.0.1", 40180);
  const pid_t child = spawn([&] {
    Listener l;
    const char* w = nullptr;
    if (l.open(record, &w) != 0) return 10;
    if (write(ready[1], "x", 1) != 1) return 11;
    pause();  // until killed
    return 12;
  });
  close(ready[1]);
  char x;
  REQUIRE(read(ready[0], &x, 1) == 1);
  close(ready[0]);
  Dialer pending;
  REQUIRE(dial(pending, record) == 0);  // waits in the backlog when the owner dies
  const char* why = nullptr;
  REQUIRE(pending.send_hello(54000, nullptr, 0, &why) == 0);
  REQUIRE(kill(child, SIGKILL) == 0);
  CHECK(wait_exit(child) == 1000 + SIGKILL);
  Reply reply;
  PassedFds got;
  REQUIRE(readable(pending.fd(), 5000));
  CHECK(pending.poll_reply(reply, got, &why) == ReplyStatus::gone);
  Dialer late;
  CHECK(dial(late, record) == -ECONNREFUSED);  // no stale record
}
