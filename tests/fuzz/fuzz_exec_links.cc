// libFuzzer target for FASTSOCK_EXEC_LINKS (src/exec_links.cc) and the shm link's token in
// it (shm/shm_exec_token.cc): the new image of an exec reads both from its environment,
// which whoever runs it controls.
//
// Every input is used twice:
//   - as text (a NUL-terminated copy), given to parse_links and parse_exec_token: what they
//     accept must hold what adoption relies on (bounded descriptor lists, non-negative
//     descriptors, lookup finds the entry that lists the descriptor), and writing it again
//     must read back the same;
//   - as a description of entries and tokens (FuzzedDataProvider), written with
//     format_entry and format_exec_token as the old image writes them and read back: every
//     entry comes back unchanged, and a token is refused exactly when it breaks one of the
//     documented rules.
// Invariants abort on violation, on top of the sanitizers' checks.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exec_links.hpp"
#include "shm_exec_token.hpp"

using namespace fastsock;
using namespace fastsock::exec_handover;
using fastsock::shm::ExecToken;

namespace {

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz_exec_links: invariant failed: %s (line %d)\n", #cond,    \
                   __LINE__);                                                             \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

constexpr long kPid = 4242;  // the pid of the seeds (tests/fuzz/exec-links-corpus)

// A NUL-terminated copy: parse_links writes into its text, and a value never holds a NUL.
std::vector<char> c_string(const char* data, size_t size) {
  std::vector<char> s(data, data + size);
  s.push_back('\0');
  return s;
}

bool same_token(const ExecToken& a, const ExecToken& b) {
  return a.side == b.side && a.memfd == b.memfd && a.own_bell == b.own_bell &&
         a.peer_bell == b.peer_bell && a.tcp_sent == b.tcp_sent &&
         a.tcp_received == b.tcp_received && a.shm_sent == b.shm_sent && a.flags == b.flags;
}

bool same_entry(const Links& a, int i, const Links& b, int j) {
  const Entry &x = a.entries[i], &y = b.entries[j];
  if (x.link != y.link || x.inode != y.inode || x.first_fd != y.first_fd ||
      std::strcmp(x.token, y.token) != 0 || a.fd_count[i] != b.fd_count[j])
    return false;
  return std::memcmp(a.fds[i], b.fds[j], sizeof(int) * size_t(a.fd_count[i])) == 0;
}

// The rules parse_exec_token documents, checked on their own.
bool token_valid(const ExecToken& t) {
  return (t.side == 0 || t.side == 1) && t.memfd >= 0 && t.own_bell >= 0 && t.peer_bell >= 0 &&
         t.own_bell != t.peer_bell && t.memfd != t.own_bell && t.memfd != t.peer_bell;
}

// Writes `t` and reads it back: accepted exactly when valid, then unchanged; and any token
// fits the room an entry has for it.
void check_token_written(const ExecToken& t) {
  char text[kTokenBytes];
  const int n = shm::format_exec_token(text, sizeof text, t);
  FUZZ_CHECK(n > 0 && size_t(n) < sizeof text);
  ExecToken back{};
  const bool accepted = shm::parse_exec_token(text, back);
  FUZZ_CHECK(accepted == token_valid(t));
  if (accepted) FUZZ_CHECK(same_token(back, t));
}

void check_token_text(const char* text) {
  ExecToken t{};
  if (!shm::parse_exec_token(text, t)) return;
  FUZZ_CHECK(token_valid(t));
  check_token_written(t);
}

// Where lookup must find `fd`: the first entry listing it.
Role expected_role(const Links& links, int fd, int& entry) {
  for (entry = 0; entry < links.count; ++entry)
    for (int k = 0; k < links.fd_count[entry]; ++k)
      if (links.fds[entry][k] == fd) return links.fds[entry][0] == fd ? Role::first : Role::extra;
  return Role::none;
}

void check_lookup(const Links& links, int fd) {
  int i = 0;
  const Role want = expected_role(links, fd, i);
  Entry got{};
  FUZZ_CHECK(lookup(links, fd, got) == want);
  if (want == Role::none) return;
  const Entry& e = links.entries[i];
  FUZZ_CHECK(got.token == e.token && got.first_fd == e.first_fd && got.link == e.link &&
             got.inode == e.inode);
}

// What adoption relies on, for a table parsed from `text` (`size` bytes before its NUL).
void check_links(const Links& links, const char* text, size_t size, int probe_fd) {
  FUZZ_CHECK(links.count >= 0 && links.count <= kMaxHanded);
  const char* after_previous = text;
  for (int i = 0; i < links.count; ++i) {
    const Entry& e = links.entries[i];
    FUZZ_CHECK(links.fd_count[i] >= 1 && links.fd_count[i] <= kMaxFdsPerConn);
    FUZZ_CHECK(unsigned(e.link) < unsigned(kTransportCount));
    FUZZ_CHECK(e.first_fd == links.fds[i][0]);
    for (int k = 0; k < links.fd_count[i]; ++k) {
      FUZZ_CHECK(links.fds[i][k] >= 0);
      check_lookup(links, links.fds[i][k]);
    }
    // Each token is a piece of the text of its own, in order, without the separator.
    FUZZ_CHECK(e.token >= after_previous && e.token <= text + size);
    const size_t len = std::strlen(e.token);
    FUZZ_CHECK(e.token + len <= text + size);
    FUZZ_CHECK(std::memchr(e.token, ';', len) == nullptr);
    after_previous = e.token + len;
    check_token_text(e.token);
  }
  check_lookup(links, -1);
  check_lookup(links, probe_fd);
}

// Writes every entry of `links` again, as the old image would, and reads the result.
void check_rewritten(const Links& links) {
  std::string value = std::to_string(kPid);
  for (int i = 0; i < links.count; ++i) {
    const Entry& e = links.entries[i];
    const int n = links.fd_count[i];
    char probe[1];  // the length first, as with snprintf
    const size_t len = format_entry(probe, sizeof probe, e.link, e.inode, links.fds[i], n,
                                    e.token);
    const size_t at = value.size();
    value.resize(at + len + 1);
    FUZZ_CHECK(format_entry(&value[at], len + 1, e.link, e.inode, links.fds[i], n, e.token) ==
               len);
    FUZZ_CHECK(value[at + len] == '\0');
    value.resize(at + len);
  }
  std::vector<char> copy = c_string(value.data(), value.size());
  static Links again;
  FUZZ_CHECK(parse_links(copy.data(), kPid, again) == 0);
  FUZZ_CHECK(again.count == links.count);
  for (int i = 0; i < links.count; ++i) FUZZ_CHECK(same_entry(again, i, links, i));
}

void check_text(const uint8_t* data, size_t size) {
  const char* chars = reinterpret_cast<const char*>(data);
  std::vector<char> text = c_string(chars, size);
  const size_t len = std::strlen(text.data());
  check_token_text(text.data());

  int probe_fd = 0;
  std::memcpy(&probe_fd, data, size < sizeof probe_fd ? size : sizeof probe_fd);
  static Links links;  // 4 KiB: static, as in the library
  const int malformed = parse_links(text.data(), kPid, links);
  FUZZ_CHECK(malformed >= 0);
  check_links(links, text.data(), len, probe_fd);
  check_rewritten(links);

  if (links.count > 0) {  // the same value, for another process: nothing
    static Links other;
    std::vector<char> again = c_string(chars, size);
    FUZZ_CHECK(parse_links(again.data(), kPid + 1, other) == 0);
    FUZZ_CHECK(other.count == 0);
  }
}

ExecToken consume_token(FuzzedDataProvider& in) {
  ExecToken t;
  // Mostly plausible values, so that both sides of every rule are reached.
  t.side = in.ConsumeBool() ? in.ConsumeIntegralInRange(-1, 2) : in.ConsumeIntegral<int>();
  int* fds[] = {&t.memfd, &t.own_bell, &t.peer_bell};
  for (int* fd : fds)
    *fd = in.ConsumeBool() ? in.ConsumeIntegralInRange(-2, 12) : in.ConsumeIntegral<int>();
  t.tcp_sent = in.ConsumeIntegral<uint64_t>();
  t.tcp_received = in.ConsumeIntegral<uint64_t>();
  t.shm_sent = in.ConsumeIntegral<uint64_t>();
  t.flags = in.ConsumeIntegral<unsigned>();
  return t;
}

// Entries as the old image writes them, read back by the new one.
void check_written(FuzzedDataProvider& in) {
  struct Written {
    bool shm_token;
    ExecToken token;
  };
  static Links expected;  // what was written, with tokens pointing into `tokens`
  static std::string tokens[kMaxHanded + 2];
  static Written written[kMaxHanded + 2];
  const int count = in.ConsumeIntegralInRange(0, kMaxHanded + 2);
  std::string value = std::to_string(kPid);
  for (int i = 0; i < count; ++i) {
    int fds[kMaxFdsPerConn];
    const int n = in.ConsumeIntegralInRange(1, kMaxFdsPerConn);
    for (int k = 0; k < n; ++k) fds[k] = in.ConsumeIntegralInRange(0, INT32_MAX);
    const TransportId link = TransportId(in.ConsumeIntegralInRange(0, kTransportCount - 1));
    const unsigned long inode = in.ConsumeIntegral<unsigned long>();
    written[i].shm_token = in.ConsumeBool();
    if (written[i].shm_token) {
      written[i].token = consume_token(in);
      check_token_written(written[i].token);
      char text[kTokenBytes];
      shm::format_exec_token(text, sizeof text, written[i].token);
      tokens[i] = text;
    } else {
      // Any token a link might write: up to kTokenBytes - 1 bytes, no ';' and no NUL.
      tokens[i] = in.ConsumeRandomLengthString(kTokenBytes - 1);
      std::erase_if(tokens[i], [](char c) { return c == ';' || c == '\0'; });
    }

    // The longest entry fits the room the old image reserves, and a short buffer gets a
    // NUL-terminated prefix with the full length reported (snprintf's contract).
    char entry[kEntryBytes + 1];
    const size_t len = format_entry(entry, sizeof entry, link, inode, fds, n, tokens[i].c_str());
    FUZZ_CHECK(len <= kEntryBytes && std::strlen(entry) == len);
    const size_t cap = in.ConsumeIntegralInRange<size_t>(0, len + 1);
    char cut[kEntryBytes + 1];
    std::memset(cut, 'x', sizeof cut);
    FUZZ_CHECK(format_entry(cut, cap, link, inode, fds, n, tokens[i].c_str()) == len);
    if (cap > 0) {
      FUZZ_CHECK(std::strlen(cut) == cap - 1 && std::memcmp(cut, entry, cap - 1) == 0);
    }
    FUZZ_CHECK(cap == sizeof cut || cut[cap] == 'x');  // nothing written past cap
    value += entry;

    if (i < kMaxHanded) {
      expected.entries[i] = Entry{link, inode, fds[0], tokens[i].c_str()};
      std::memcpy(expected.fds[i], fds, sizeof(int) * size_t(n));
      expected.fd_count[i] = n;
    }
  }
  expected.count = count < kMaxHanded ? count : kMaxHanded;

  std::vector<char> text = c_string(value.data(), value.size());
  static Links links;
  FUZZ_CHECK(parse_links(text.data(), kPid, links) == 0);
  FUZZ_CHECK(links.count == expected.count);  // entries beyond the bound are ignored
  check_links(links, text.data(), value.size(), -1);
  for (int i = 0; i < links.count; ++i) {
    FUZZ_CHECK(same_entry(links, i, expected, i));
    if (!written[i].shm_token) continue;
    ExecToken back{};
    FUZZ_CHECK(shm::parse_exec_token(links.entries[i].token, back) ==
               token_valid(written[i].token));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_text(data, size);
  FuzzedDataProvider in(data, size);
  check_written(in);
  return 0;
}
