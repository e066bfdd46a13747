// Which RDMA connect request may claim an accepted TCP connection
// (transports/verbs/verbs_claim.hpp): the request's source address must be the connector's.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstring>

#include "verbs_claim.hpp"

using fastsock::stats::Endpoint;
using fastsock::verbs::is_loopback;
using fastsock::verbs::request_may_claim;

namespace {

Endpoint ep(const char* text, uint16_t port = 0) {
  Endpoint e{};
  e.port = port;
  if (inet_pton(AF_INET, text, e.addr) == 1) {
    e.family = AF_INET;
  } else {
    REQUIRE(inet_pton(AF_INET6, text, e.addr) == 1);
    e.family = AF_INET6;
  }
  return e;
}

}  // namespace

TEST_CASE("loopback addresses", "[verbs][claim]") {
  CHECK(is_loopback(ep("127.0.0.1")));
  CHECK(is_loopback(ep("127.3.2.1")));
  CHECK(is_loopback(ep("::1")));
  CHECK(is_loopback(ep("::ffff:127.0.0.1")));
  CHECK_FALSE(is_loopback(ep("10.77.0.1")));
  CHECK_FALSE(is_loopback(ep("::")));
  CHECK_FALSE(is_loopback(ep("::ffff:10.0.0.1")));
  CHECK_FALSE(is_loopback(Endpoint{}));
}

TEST_CASE("a request from the connector's own address may claim its connection",
          "[verbs][claim]") {
  // Ports never matter: the CM's port is not the TCP connection's.
  CHECK(request_may_claim(ep("10.0.0.2", 4791), ep("10.0.0.1", 5000), ep("10.0.0.2", 40000)));
  CHECK(request_may_claim(ep("fd00::2"), ep("fd00::1"), ep("fd00::2", 40000)));
  // A v4 connector that a dual-stack listener sees as ::ffff:a.b.c.d.
  CHECK(request_may_claim(ep("10.0.0.2"), ep("10.0.0.1"), ep("::ffff:10.0.0.2", 40000)));
  CHECK(request_may_claim(ep("::ffff:10.0.0.2"), ep("10.0.0.1"), ep("10.0.0.2", 40000)));
  // Both ends on this host, to one of its non-loopback addresses.
  CHECK(request_may_claim(ep("10.77.0.1"), ep("10.77.0.1"), ep("10.77.0.1", 40000)));
}

TEST_CASE("a request from another address is refused", "[verbs][claim]") {
  // Another host that guessed the 4-tuple.
  CHECK_FALSE(request_may_claim(ep("10.0.0.9"), ep("10.0.0.1"), ep("10.0.0.2", 40000)));
  CHECK_FALSE(request_may_claim(ep("fd00::9"), ep("fd00::1"), ep("fd00::2", 40000)));
  // Same bytes, other family.
  CHECK_FALSE(request_may_claim(ep("::a00:2"), ep("10.0.0.1"), ep("10.0.0.2", 40000)));
  // An unknown source.
  CHECK_FALSE(request_may_claim(Endpoint{}, ep("10.0.0.1"), ep("10.0.0.2", 40000)));
  CHECK_FALSE(request_may_claim(Endpoint{}, Endpoint{}, Endpoint{}));
}

TEST_CASE("a connection on TCP loopback is claimed only from this host's own address",
          "[verbs][claim]") {
  // The connector dialled this host's RDMA address from itself.
  CHECK(request_may_claim(ep("10.77.0.1"), ep("10.77.0.1"), ep("127.0.0.1", 40000)));
  CHECK(request_may_claim(ep("fd00::1"), ep("fd00::1"), ep("::1", 40000)));
  // Another host cannot claim a loopback connection, whatever it writes.
  CHECK_FALSE(request_may_claim(ep("10.77.0.2"), ep("10.77.0.1"), ep("127.0.0.1", 40000)));
  // Nor can a source that is loopback itself (the CM never reports one for a device).
  CHECK_FALSE(request_may_claim(ep("127.0.0.1"), ep("10.77.0.1"), ep("127.0.0.1", 40000)));
}
