// FASTSOCK_EXEC_LINKS and the shm link's token in it, as text (src/exec_links.hpp,
// shm/shm_exec_token.hpp); fuzzed by tests/fuzz/fuzz_exec_links.cc.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "exec_links.hpp"
#include "shm_exec_token.hpp"

using namespace fastsock;
using namespace fastsock::exec_handover;
using fastsock::shm::ExecToken;

namespace {

// parse_links writes into its text: a copy that lives as long as the test's table.
struct Parsed {
  std::string text;
  Links links;
  int malformed;
  Parsed(std::string value, long pid) : text(std::move(value)) {
    malformed = parse_links(text.data(), pid, links);
  }
};

}  // namespace

TEST_CASE("exec links: what the old image writes, the new one reads") {
  const int one[] = {5};
  const int two[] = {0, 1};
  std::string value = "4242";
  char entry[kEntryBytes];
  const size_t len =
      format_entry(entry, sizeof entry, TransportId::shm, 1234567, one, 1, "0,7,8,9,0,0,0,0");
  CHECK(len == std::strlen(entry));
  CHECK(std::string(entry) == ";0/1234567/5/0,7,8,9,0,0,0,0");
  value += entry;
  format_entry(entry, sizeof entry, TransportId::shm, 98765, two, 2, "1,10,11,12,4,8,12,1");
  value += entry;

  Parsed p(value, 4242);
  CHECK(p.malformed == 0);
  REQUIRE(p.links.count == 2);
  CHECK(p.links.entries[0].inode == 1234567);
  CHECK(std::string(p.links.entries[0].token) == "0,7,8,9,0,0,0,0");
  CHECK(p.links.fd_count[1] == 2);
  CHECK(std::string(p.links.entries[1].token) == "1,10,11,12,4,8,12,1");

  Entry e{};
  CHECK(lookup(p.links, 5, e) == Role::first);
  CHECK(e.first_fd == 5);
  CHECK(lookup(p.links, 1, e) == Role::extra);
  CHECK(e.first_fd == 0);
  CHECK(e.inode == 98765);
  CHECK(lookup(p.links, 2, e) == Role::none);
}

TEST_CASE("exec links: a value written for another process yields nothing") {
  Parsed p("4241;0/111/3/0,20,21,22,0,0,0,0", 4242);
  CHECK(p.malformed == 0);
  CHECK(p.links.count == 0);
  Parsed empty("", 4242);
  CHECK(empty.links.count == 0);
}

TEST_CASE("exec links: malformed entries are skipped and counted") {
  Parsed p("7;"
           "9/1/3/x;"                  // no such link
           "0/1/-3/x;"                 // negative descriptor
           "0/1/3,/x;"                 // empty descriptor
           "0/1/3;"                    // no token
           "0/1/1,2,3,4,5,6,7,8,9/x;"  // more descriptors than an entry lists
           "0/1/2147483648/x;"         // beyond int
           "0/2/1,2,3,4,5,6,7,8/ok",
           7);
  CHECK(p.malformed == 6);
  REQUIRE(p.links.count == 1);
  CHECK(p.links.fd_count[0] == kMaxFdsPerConn);
  CHECK(std::string(p.links.entries[0].token) == "ok");
}

TEST_CASE("exec links: entries beyond the bound are ignored") {
  std::string value = "1";
  for (int i = 0; i < kMaxHanded + 3; ++i) value += ";0/" + std::to_string(i) + "/3/t";
  Parsed p(value, 1);
  CHECK(p.malformed == 0);
  CHECK(p.links.count == kMaxHanded);
}

TEST_CASE("exec links: a short buffer gets a terminated prefix and the full length") {
  const int fds[] = {3, 4};
  char full[64], cut[8];
  const size_t len = format_entry(full, sizeof full, TransportId::shm, 42, fds, 2, "tok");
  CHECK(std::string(full) == ";0/42/3,4/tok");
  CHECK(format_entry(cut, sizeof cut, TransportId::shm, 42, fds, 2, "tok") == len);
  CHECK(std::string(cut) == ";0/42/3");
}

TEST_CASE("shm exec token: written and read back") {
  const ExecToken t{1, 7, 8, 9, 10, 20, 18446744073709551615ull, 9};
  char text[kTokenBytes];
  REQUIRE(shm::format_exec_token(text, sizeof text, t) > 0);
  CHECK(std::string(text) == "1,7,8,9,10,20,18446744073709551615,9");
  ExecToken back{};
  REQUIRE(shm::parse_exec_token(text, back));
  CHECK(back.side == 1);
  CHECK(back.memfd == 7);
  CHECK(back.own_bell == 8);
  CHECK(back.peer_bell == 9);
  CHECK(back.tcp_sent == 10);
  CHECK(back.tcp_received == 20);
  CHECK(back.shm_sent == t.shm_sent);
  CHECK(back.flags == 9);
}

TEST_CASE("shm exec token: refused unless well formed") {
  ExecToken t{};
  for (const char* bad : {"", "0,7,8,9,0,0,0", "0,7,8,9,0,0,0,0,", "0,7,8,9,0,0,0,0 ",
                          "2,7,8,9,0,0,0,0", "-1,7,8,9,0,0,0,0", "0,-7,8,9,0,0,0,0",
                          "0,7,-8,9,0,0,0,0", "0,7,8,-9,0,0,0,0", "0,7,8,8,0,0,0,0",
                          "0,8,8,9,0,0,0,0", "0,9,8,9,0,0,0,0", "0;7,8,9,0,0,0,0"}) {
    INFO(bad);
    CHECK_FALSE(shm::parse_exec_token(bad, t));
  }
  CHECK(shm::parse_exec_token("0,7,8,9,0,0,0,0", t));
}
