// The redirect table of pre-forking servers (transports/verbs/verbs_redirect.hpp): what a
// child publishes the listening process takes, once, by the exact 4-tuple; a full table
// refuses; entries nobody took are reused after kStaleNs; it is shared over fork; its owner
// passes to one of two children that both found it gone.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verbs_cm.hpp"
#include "verbs_redirect.hpp"

using fastsock::stats::Endpoint;
using fastsock::verbs::RedirectTable;
using fastsock::verbs::TcpKey;

namespace {

TcpKey key(uint16_t peer_port, const char* peer = "10.0.0.2") {
  TcpKey k{};
  k.local.family = k.peer.family = AF_INET;
  REQUIRE(inet_pton(AF_INET, "10.0.0.1", k.local.addr) == 1);
  REQUIRE(inet_pton(AF_INET, peer, k.peer.addr) == 1);
  k.local.port = 5000;
  k.peer.port = peer_port;
  return k;
}

struct Table {
  RedirectTable* t = RedirectTable::create(getpid());
  ~Table() { RedirectTable::destroy(t); }
};

}  // namespace

TEST_CASE("a published redirect is taken once, by its exact connection") {
  Table table;
  REQUIRE(table.t != nullptr);
  CHECK(table.t->take(key(40000)) == 0);
  REQUIRE(table.t->publish(key(40000), 61000, 1));
  REQUIRE(table.t->publish(key(40001), 61001, 1));
  CHECK(table.t->take(key(40002)) == 0);              // another port
  CHECK(table.t->take(key(40000, "10.0.0.3")) == 0);  // another address
  CHECK(table.t->take(key(40001)) == 61001);
  CHECK(table.t->take(key(40000)) == 61000);
  CHECK(table.t->take(key(40000)) == 0);  // taken already
}

TEST_CASE("a full table refuses, and reuses entries nobody took in time") {
  Table table;
  REQUIRE(table.t != nullptr);
  for (int i = 0; i < RedirectTable::kEntries; ++i)
    REQUIRE(table.t->publish(key(uint16_t(10000 + i)), 60000, 100));
  CHECK_FALSE(table.t->publish(key(9999), 60001, 100 + RedirectTable::kStaleNs));
  // Later than kStaleNs after them: the oldest are free again.
  REQUIRE(table.t->publish(key(9999), 60001, 101 + RedirectTable::kStaleNs));
  CHECK(table.t->take(key(9999)) == 60001);
  // One of the others was overwritten; the rest are still there.
  int still = 0;
  for (int i = 0; i < RedirectTable::kEntries; ++i) still += table.t->take(key(uint16_t(10000 + i))) != 0;
  CHECK(still == RedirectTable::kEntries - 1);
}

TEST_CASE("a forked child's redirect reaches the parent") {
  Table table;
  REQUIRE(table.t != nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(table.t->publish(key(40000), 61000, 1) ? 0 : 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(table.t->take(key(40000)) == 61000);
}

TEST_CASE("the owner passes to one child only, and only from the owner it names") {
  Table table;
  REQUIRE(table.t != nullptr);
  CHECK(table.t->owner() == getpid());
  const pid_t gone = getpid();
  int status[2];
  pid_t children[2];
  for (int i = 0; i < 2; ++i) {
    children[i] = fork();
    REQUIRE(children[i] >= 0);
    if (children[i] == 0) _exit(table.t->pass_owner(gone, getpid()) ? 0 : 1);
  }
  int passed = 0;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(waitpid(children[i], &status[i], 0) == children[i]);
    REQUIRE(WIFEXITED(status[i]));
    passed += WEXITSTATUS(status[i]) == 0;
  }
  CHECK(passed == 1);
  const pid_t now = table.t->owner();
  CHECK((now == children[0] || now == children[1]));
  CHECK_FALSE(table.t->pass_owner(gone, getpid()));  // no longer the owner it names
  CHECK(table.t->pass_owner(now, gone));  // given back, as a failed takeover does
  CHECK(table.t->owner() == gone);
}
