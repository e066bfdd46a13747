// Late attach's rendezvous (shm_rendezvous_late.hpp): the connector's offer under the TCP
// connection's name, the accepting end's dial, and the checks each end makes of the other.
#include <catch2/catch.hpp>

#include <sys/eventfd.h>
#include <sys/un.h>

#include "rendezvous_helpers.hpp"
#include "rendezvous_skip.hpp"
#include "shm_process.hpp"
#include "shm_rendezvous_late.hpp"

using namespace fastsock::shm;
using namespace rvtest;

namespace {

// A loopback TCP connection: the connecting end and the accepted one.
struct TcpPair {
  TcpServer srv;
  int connector = -1, acceptor = -1;
  TcpPair() {
    if (!tcp_listen(srv, "127.0.0.1")) return;
    connector = tcp_connect(srv.local);
    if (connector >= 0) acceptor = accept(srv.fd, nullptr, nullptr);
  }
  ~TcpPair() {
    if (connector >= 0) close(connector);
    if (acceptor >= 0) close(acceptor);
  }
};

// The accepting end's side: dials the offer of `p`'s connection and sends a hello with two
// eventfds (standing for the segment and the bell) and `proof`. 0 or -errno.
int dial_and_hello(Dialer& d, const TcpPair& p, int proof) {
  const char* why = nullptr;
  const int fd = late_dial(peer_of(p.acceptor), local_of(p.acceptor), geteuid(), &why);
  if (fd < 0) return fd;
  d.adopt_late(fd, local_of(p.acceptor).port);
  const int a = eventfd(0, EFD_CLOEXEC), b = eventfd(0, EFD_CLOEXEC);
  const int fds[kLateHelloFds] = {a, b, proof};
  const int rc = d.send_hello(socket_cookie(p.acceptor), fds, kLateHelloFds, &why);
  close(a);
  close(b);
  return rc;
}

}  // namespace

TEST_CASE("a late attach: the accepting end dials the connector's offer with its socket as proof") {
  TcpPair p;
  REQUIRE(p.acceptor >= 0);
  const char* why = nullptr;
  LateOffer offer;
  REQUIRE(offer.open(local_of(p.connector), peer_of(p.connector), &why) == 0);
  Handshake h;
  CHECK_FALSE(offer.take(h, &why));  // nobody dialled yet
  CHECK(offer.is_open());

  Dialer d;
  REQUIRE(dial_and_hello(d, p, p.acceptor) == 0);
  REQUIRE(offer.take(h, &why));
  CHECK_FALSE(offer.is_open());  // one attach per offer
  REQUIRE(h.valid());
  CHECK(h.fds().count() == kLateHelloFds);
  const int bell = eventfd(0, EFD_CLOEXEC);
  REQUIRE(h.accept(&bell, 1, &why) == 0);
  close(bell);
  Reply reply;
  PassedFds fds;
  CHECK(d.poll_reply(reply, fds, &why) == ReplyStatus::accepted);
  CHECK(fds.count() == 1);
  CHECK(d.fd() == -1);  // a late channel serves one handshake
}

TEST_CASE("a late hello whose socket is not the connection's accepting end is refused") {
  TcpPair p, other;
  REQUIRE(p.acceptor >= 0);
  REQUIRE(other.acceptor >= 0);
  const char* why = nullptr;
  LateOffer offer;
  REQUIRE(offer.open(local_of(p.connector), peer_of(p.connector), &why) == 0);
  Handshake h;

  SECTION("another connection's accepting end") {
    Dialer d;
    REQUIRE(dial_and_hello(d, p, other.acceptor) == 0);
    why = nullptr;
    CHECK_FALSE(offer.take(h, &why));
    REQUIRE(why != nullptr);
    CHECK(std::string(why).find("does not hold the accepting end") != std::string::npos);
  }
  SECTION("the connecting end itself (its endpoints are the other way round)") {
    Dialer d;
    REQUIRE(dial_and_hello(d, p, p.connector) == 0);
    CHECK_FALSE(offer.take(h, &why));
  }
  SECTION("not a socket") {
    Dialer d;
    const int efd = eventfd(0, EFD_CLOEXEC);
    REQUIRE(dial_and_hello(d, p, efd) == 0);
    close(efd);
    CHECK_FALSE(offer.take(h, &why));
  }
  // The offer stays open for the real peer.
  CHECK(offer.is_open());
  Dialer good;
  REQUIRE(dial_and_hello(good, p, p.acceptor) == 0);
  CHECK(offer.take(h, &why));
}

TEST_CASE("a late dial without an offer is refused, and names are per connection and uid") {
  TcpPair p;
  REQUIRE(p.acceptor >= 0);
  const char* why = nullptr;
  CHECK(late_dial(peer_of(p.acceptor), local_of(p.acceptor), geteuid(), &why) == -ECONNREFUSED);
  LateOffer offer;
  REQUIRE(offer.open(local_of(p.connector), peer_of(p.connector), &why) == 0);
  // The same connection seen from a socket of the other family, or named for another uid.
  CHECK(late_dial(peer_of(p.acceptor), local_of(p.acceptor), geteuid() + 1, &why) == -ECONNREFUSED);
  const int fd = late_dial(peer_of(p.acceptor), local_of(p.acceptor), geteuid(), &why);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  sockaddr_un a, b;
  const socklen_t la = late_address(ep("127.0.0.1", 1000), ep("127.0.0.1", 80), 0, a);
  const socklen_t lb = late_address(ep("::ffff:127.0.0.1", 1000), ep("::ffff:127.0.0.1", 80), 0, b);
  REQUIRE(la > 0);
  CHECK(la == lb);
  CHECK(memcmp(&a, &b, la) == 0);  // IPv4-mapped is IPv4
  CHECK(late_address(ep("127.0.0.1", 1000), ep("::1", 80), 0, b) == 0);
  CHECK(late_address(ep("::1", 65535), ep("::1", 65535), 4294967294u, b) > 0);  // fits
}

TEST_CASE("a late-attach offer of another uid is not dialled", "[root]") {
  if (geteuid() != 0) {
    rvskip::skip("needs root to run a child as another uid");
    return;
  }
  constexpr uid_t kNobody = 65534;
  TcpPair p;
  REQUIRE(p.acceptor >= 0);
  const Endpoint c = local_of(p.connector), s = peer_of(p.connector);
  int up[2], down[2];  // child -> parent: bound; parent -> child: done
  REQUIRE(pipe(up) == 0);
  REQUIRE(pipe(down) == 0);
  // A process of another uid squats the name the real connector (root) would offer.
  const pid_t child = spawn([&] {
    close(up[0]);
    close(down[1]);
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return 10;
    sockaddr_un a;
    const socklen_t len = late_address(c, s, 0, a);
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 8) != 0) return 11;
    (void)!write(up[1], "x", 1);
    char byte;
    (void)!read(down[0], &byte, 1);  // until the parent is done
    return 0;
  });
  close(up[1]);
  close(down[0]);
  char byte;
  REQUIRE(read(up[0], &byte, 1) == 1);
  const char* why = nullptr;
  CHECK(late_dial(peer_of(p.acceptor), local_of(p.acceptor), 0, &why) == -EPERM);
  // A worker running as that uid itself may dial it (a pre-fork server's workers).
  const pid_t worker = spawn([&] {
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return 10;
    forget_effective_uid();  // (the library's setuid hook does this)
    const char* w = nullptr;
    const int fd = late_dial(peer_of(p.acceptor), local_of(p.acceptor), 0, &w);
    return fd >= 0 ? 0 : 12;
  });
  CHECK(wait_exit(worker) == 0);
  close(down[1]);  // the child's read ends
  CHECK(wait_exit(child) == 0);
  close(up[0]);
}
