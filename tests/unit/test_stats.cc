// Endpoint conversions used by stats and logs, and the kernel-TCP transport's byte ranges
// over a real loopback connection.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "endpoint.hpp"
#include "fastsock_build_config.h"
#include "socket.hpp"
#include "transport.hpp"

using namespace fastsock;

TEST_CASE("endpoints round-trip and format like the log and stat expect") {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(443);
  inet_pton(AF_INET6, "::1", &a.sin6_addr);
  auto ep = endpoint_from(reinterpret_cast<sockaddr*>(&a), sizeof a);
  char text[64];
  format_endpoint(ep, text, sizeof text);
  CHECK(std::string(text) == "[::1]:443");
  sockaddr_storage back;
  REQUIRE(sockaddr_from(ep, back) == sizeof(sockaddr_in6));
  CHECK(memcmp(&reinterpret_cast<sockaddr_in6*>(&back)->sin6_addr, &a.sin6_addr, 16) == 0);

  sockaddr_in b{};
  b.sin_family = AF_INET;
  b.sin_port = htons(5201);
  inet_pton(AF_INET, "127.0.0.1", &b.sin_addr);
  format_endpoint(endpoint_from(reinterpret_cast<sockaddr*>(&b), sizeof b), text, sizeof text);
  CHECK(std::string(text) == "127.0.0.1:5201");
}

TEST_CASE("short or foreign addresses give an unknown endpoint, never a read past the end") {
  sockaddr_in b{};
  b.sin_family = AF_INET;
  CHECK(endpoint_from(reinterpret_cast<sockaddr*>(&b), sizeof b - 1).family == 0);
  sockaddr un{};
  un.sa_family = AF_UNIX;
  CHECK(endpoint_from(&un, sizeof un).family == 0);
  CHECK(endpoint_from(nullptr, 0).family == 0);
  char text[8];
  format_endpoint(stats::Endpoint{}, text, sizeof text);
  CHECK(std::string(text) == "?");
}

TEST_CASE("the tcp transport is registered, available, and moves byte ranges") {
  const TransportEntry* tcp = find_transport(TransportId::tcp);
  REQUIRE(tcp);
  CHECK(tcp->probe().available);
  Transport& t = tcp->instance();
  CHECK(t.id() == TransportId::tcp);
  CHECK(t.kernel_carries_data());

  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(lfd, 1) == 0);
  REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  int a = accept(lfd, nullptr, nullptr);
  REQUIRE(a >= 0);

  Socket dummy;
  char part1[] = "hello ", part2[] = "world";
  iovec out[2] = {{part1, 6}, {part2, 5}};
  CHECK(t.send(dummy, c, out, 2, 0) == 11);
  char got[16] = {};
  iovec in[1] = {{got, 11}};
  CHECK(t.recv(dummy, a, in, 1, MSG_WAITALL) == 11);
  CHECK(std::string(got) == "hello world");
  CHECK(t.shutdown(dummy, c, SHUT_WR) == 0);
  CHECK(t.recv(dummy, a, in, 1, 0) == 0);  // EOF after the half-close
  CHECK(t.send(dummy, -1, out, 1, 0) == -EBADF);
  CHECK(t.bytes_readable(dummy, a) == 0);
  CHECK(t.send(dummy, a, out, 1, 0) == 6);
  pollfd w[Transport::kMaxWaitFds];
  REQUIRE(t.wait_fds(dummy, c, POLLIN, w) == 1);
  CHECK(w[0].fd == c);
  CHECK((t.poll_now(dummy, c, POLLIN) & POLLIN) != 0);
  CHECK(t.bytes_readable(dummy, c) == 6);
  close(a);
  close(c);
  close(lfd);
}

TEST_CASE("shm is always built; verbs when rdma-core was found; vendor unless disabled") {
  REQUIRE(find_transport(TransportId::shm) != nullptr);
  CHECK(find_transport(TransportId::shm)->instance().id() == TransportId::shm);
#if FASTSOCK_HAVE_VENDOR
  REQUIRE(find_transport(TransportId::vendor) != nullptr);
  CHECK(find_transport(TransportId::vendor)->instance().id() == TransportId::vendor);
  // The probe names every profile: the built-in ones at least.
  CHECK(std::string(find_transport(TransportId::vendor)->probe().reason).find("rsocket: ") !=
        std::string::npos);
#else
  CHECK(find_transport(TransportId::vendor) == nullptr);
  CHECK(std::string(missing_transport_reason(TransportId::vendor)).find("not in this build") == 0);
#endif
#if FASTSOCK_HAVE_VERBS_LIBS
  REQUIRE(find_transport(TransportId::verbs) != nullptr);
  CHECK(find_transport(TransportId::verbs)->instance().id() == TransportId::verbs);
  // This host has no RDMA device: the probe says so, and nothing is loaded for it.
  const Probe probe = find_transport(TransportId::verbs)->probe();
  if (!probe.available) CHECK(std::string(probe.reason).find("no RDMA device") == 0);
#else
  CHECK(find_transport(TransportId::verbs) == nullptr);
  CHECK(std::string(missing_transport_reason(TransportId::verbs)).find("not in this build") == 0);
#endif
}
