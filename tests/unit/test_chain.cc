// The failover chain decision: order, rules, missing and failing links, and the reasons.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "chain.hpp"

using namespace fastsock;

namespace {

sockaddr_in v4(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

bool none_registered(TransportId) noexcept { return false; }
bool all_registered(TransportId) noexcept { return true; }

// Attach outcome per transport, for the test in progress.
struct Outcomes {
  bool shm = false, verbs = false, vendor = false;
  int calls = 0;
};

bool scripted_attach(void* ctx, TransportId id, char* why, size_t len) noexcept {
  auto& o = *static_cast<Outcomes*>(ctx);
  ++o.calls;
  bool ok = id == TransportId::shm ? o.shm : id == TransportId::verbs ? o.verbs : o.vendor;
  if (!ok) snprintf(why, len, "refused");
  return ok;
}

std::string walk(const Config& cfg, Outcomes& o, bool (*registered)(TransportId) noexcept,
                 Direction dir = Direction::client, const sockaddr* addr = nullptr,
                 TransportId* picked = nullptr) {
  char reasons[120];
  ChainInputs in{&cfg, "prog", dir, addr, registered, scripted_attach, &o};
  TransportId id = walk_chain(in, reasons, sizeof reasons);
  if (picked) *picked = id;
  return reasons;
}

}  // namespace

TEST_CASE("with no transport built, tcp carries everything and each link says why") {
  Config cfg;  // default chain shm,verbs,vendor,tcp
  Outcomes o;
  TransportId id;
  std::string why = walk(cfg, o, none_registered, Direction::client, nullptr, &id);
  CHECK(id == TransportId::tcp);
  CHECK(why == "shm: not built; verbs: not built; vendor: not built");
  CHECK(o.calls == 0);
}

TEST_CASE("the first link that attaches wins; earlier refusals are reasons") {
  Config cfg;
  Outcomes o;
  o.verbs = true;
  TransportId id;
  std::string why = walk(cfg, o, all_registered, Direction::client, nullptr, &id);
  CHECK(id == TransportId::verbs);
  CHECK(why == "shm: refused");
  CHECK(o.calls == 2);  // vendor never asked
}

TEST_CASE("chain order is the configured order, not the rank") {
  Config cfg;
  cfg.chain = {TransportId::vendor, TransportId::shm, TransportId::tcp};
  Outcomes o;
  o.shm = true;
  TransportId id;
  std::string why = walk(cfg, o, all_registered, Direction::client, nullptr, &id);
  CHECK(id == TransportId::shm);
  CHECK(why == "vendor: refused");
}

TEST_CASE("falling back to tcp names the links left out of the chain") {
  Config cfg;
  cfg.chain = {TransportId::shm, TransportId::tcp};
  Outcomes o;
  TransportId id;
  std::string why = walk(cfg, o, all_registered, Direction::client, nullptr, &id);
  CHECK(id == TransportId::tcp);
  CHECK(why ==
        "shm: refused; verbs: not in FASTSOCK_TRANSPORTS; vendor: not in FASTSOCK_TRANSPORTS");
}

TEST_CASE("a matching rule excludes links; a non-matching one does not") {
  Config cfg;
  Rule rule;
  rule.allowed = bit(TransportId::verbs) | bit(TransportId::tcp);
  rule.direction = Direction::client;
  rule.program_glob = "*";
  rule.address.port_lo = rule.address.port_hi = 6379;
  rule.line = 7;
  cfg.rules.push_back(rule);
  Outcomes o;
  o.shm = true;
  o.verbs = false;
  auto redis = v4("127.0.0.1", 6379);
  TransportId id;
  std::string why = walk(cfg, o, all_registered, Direction::client,
                         reinterpret_cast<sockaddr*>(&redis), &id);
  CHECK(id == TransportId::tcp);  // shm and vendor excluded, verbs refused
  CHECK(o.calls == 1);
  o = {};
  o.vendor = true;
  why = walk(cfg, o, all_registered, Direction::client, reinterpret_cast<sockaddr*>(&redis), &id);
  CHECK(why == "shm: excluded by rule on line 7; verbs: refused; "
               "vendor: excluded by rule on line 7");
  // Another port, or the server side, is not covered by the rule.
  o = {};
  o.shm = true;
  auto web = v4("127.0.0.1", 80);
  walk(cfg, o, all_registered, Direction::client, reinterpret_cast<sockaddr*>(&web), &id);
  CHECK(id == TransportId::shm);
  walk(cfg, o, all_registered, Direction::server, reinterpret_cast<sockaddr*>(&redis), &id);
  CHECK(id == TransportId::shm);
}

TEST_CASE("a configuration error forces tcp and says so") {
  Config cfg;
  cfg.chain = {TransportId::tcp};
  cfg.pass_through_forced = true;
  cfg.error = "FASTSOCK_TRANSPORTS: unknown transport 'x'";
  Outcomes o;
  o.shm = true;
  TransportId id;
  std::string why = walk(cfg, o, all_registered, Direction::client, nullptr, &id);
  CHECK(id == TransportId::tcp);
  CHECK(o.calls == 0);
  CHECK(why.find("configuration error: pass-through") != std::string::npos);
}

TEST_CASE("reasons never overflow their buffer") {
  Config cfg;
  Outcomes o;
  char tiny[16];
  ChainInputs in{&cfg, "prog", Direction::client, nullptr, all_registered, scripted_attach, &o};
  CHECK(walk_chain(in, tiny, sizeof tiny) == TransportId::tcp);
  CHECK(std::string(tiny).size() < sizeof tiny);
}
