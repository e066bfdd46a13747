// fastsock-pipe's buffers (cache-invalidate pools), element fills and hygiene rules.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include "elements.hpp"
#include "endpoint.hpp"
#include "hygiene.hpp"

using namespace fastsock_pipe;

TEST_CASE("endpoint: one buffer per direction without a pool") {
  Endpoint ep;
  ep.prepare(100, 0, false);
  CHECK(ep.slots() == 1);
  CHECK(ep.send_slot(0) == ep.send_slot(7));
  CHECK(ep.recv_slot(0) == ep.recv_slot(3));
  CHECK(ep.send_slot(0) != ep.recv_slot(0));
  // Page-aligned (16 KiB) like NetPIPE's buffers.
  CHECK(reinterpret_cast<uintptr_t>(ep.send_slot(0)) % 16384 == 0);
  CHECK(reinterpret_cast<uintptr_t>(ep.recv_slot(0)) % 16384 == 0);
}

TEST_CASE("endpoint: ping-pong's one buffer serves sends and receives, pools never share") {
  Endpoint ep;
  ep.prepare(3000, 0, true);
  CHECK(ep.send_slot(0) == ep.recv_slot(0));
  ep.prepare(100, 4096, true);  // a pool keeps its two directions apart
  CHECK(ep.send_slot(0) != ep.recv_slot(0));
  ep.prepare(100, 0, false);
  CHECK(ep.send_slot(0) != ep.recv_slot(0));
}

TEST_CASE("endpoint: a cache-invalidate pool walks distinct aligned slots before reusing one") {
  Endpoint ep;
  ep.prepare(100, 4096, false);  // 100-byte messages in 128-byte slots: 32 slots of 4096 bytes
  REQUIRE(ep.slots() == 32);
  std::set<uint8_t*> seen;
  for (std::size_t i = 0; i < 32; ++i) {
    uint8_t* p = ep.send_slot(i);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    seen.insert(p);
  }
  CHECK(seen.size() == 32);
  CHECK(ep.send_slot(32) == ep.send_slot(0));
  // The pool covers at least the requested bytes, in each direction.
  CHECK(ep.send_slot(31) + 128 - ep.send_slot(0) >= 4096);
  CHECK(ep.recv_slot(31) + 128 - ep.recv_slot(0) >= 4096);
  // Every send slot holds data (not untouched zero pages).
  for (std::size_t i = 0; i < 32; ++i) CHECK(ep.send_slot(i)[99] == 0x5a);
}

TEST_CASE("endpoint: a message larger than the pool gets one slot") {
  Endpoint ep;
  ep.prepare(10000, 4096, false);
  CHECK(ep.slots() == 1);
}

TEST_CASE("elements: parse the thesis notation and fill typed arrays") {
  ElementType t = ElementType::byte;
  REQUIRE(parse_element_type("I]", t));
  CHECK(t == ElementType::int32);
  REQUIRE(parse_element_type("D]", t));
  CHECK(t == ElementType::float64);
  REQUIRE(parse_element_type("B]", t));
  CHECK(t == ElementType::byte);
  CHECK_FALSE(parse_element_type("Q]", t));
  CHECK(element_size(ElementType::int32) == 4);
  CHECK(element_size(ElementType::float64) == 8);

  alignas(64) uint8_t buf[64];
  fill_elements(buf, sizeof buf, ElementType::int32);
  int32_t i5;
  std::memcpy(&i5, buf + 20, 4);
  CHECK(i5 == 5);
  fill_elements(buf, sizeof buf, ElementType::float64);
  double d3;
  std::memcpy(&d3, buf + 24, 8);
  CHECK(d3 == 1.5);
}

TEST_CASE("hygiene: warnings for one core, one CPU, slow governors and loopback") {
  Options o;
  o.role = Role::local;
  HostFacts quiet{4, 4, {"cpu0=performance", "cpu1=performance"}};
  auto w = hygiene_warnings(o, quiet);
  REQUIRE(w.size() == 1);  // local mode is always loopback
  CHECK(w[0].find("loopback") != std::string::npos);

  o.pin = true;
  o.cpu_tx = o.cpu_rx = 1;
  w = hygiene_warnings(o, quiet);
  CHECK(w.size() == 2);
  CHECK(w[0].find("same CPU 1") != std::string::npos);

  o.pin = false;
  HostFacts one_allowed{4, 1, {}};
  CHECK(hygiene_warnings(o, one_allowed).front().find("only run on one CPU") != std::string::npos);

  HostFacts single{1, 1, {}};
  CHECK(hygiene_warnings(o, single).front().find("fewer than 2 CPUs") != std::string::npos);

  HostFacts powersave{2, 2, {"cpu0=performance", "cpu1=powersave"}};
  w = hygiene_warnings(o, powersave);
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("cpu1=powersave") != std::string::npos);
  CHECK(w[0].find("cpu0") == std::string::npos);

  Options remote;
  remote.role = Role::transmitter;
  remote.host = "192.0.2.7";
  CHECK(hygiene_warnings(remote, quiet).empty());
  remote.host = "::1";
  CHECK(hygiene_warnings(remote, quiet).size() == 1);
}
