// libFuzzer target for the configuration parser (src/config.cc, with the vendor profiles of
// transports/vendor/vendor_profile.cc): it reads data from outside the process
// (environment, rules file).
//
// Every input is fed, whole, to each parser; then it is decoded as an environment plus a
// rules file for config_from (see decode_env below) and the resulting rules are matched
// against peers taken from the input. Besides the sanitizers' checks, the invariants the
// rest of the library relies on are checked here and abort on violation.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "config.hpp"
#include "vendor_profile.hpp"

using namespace fastsock;

namespace {

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "fuzz_config: invariant failed: %s (line %d)\n", #cond,      \
                   __LINE__);                                                           \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

constexpr const char* kVars[] = {"FASTSOCK_TRANSPORTS",   "FASTSOCK_LOG",
                                 "FASTSOCK_LOG_FILE",     "FASTSOCK_SPIN_US",
                                 "FASTSOCK_STATS",        "FASTSOCK_RULES",
                                 "FASTSOCK_SHM_RING_MAX", "FASTSOCK_VERBS_ZERO_COPY_MIN"};  // 8: one mask byte
constexpr int kVarCount = sizeof kVars / sizeof kVars[0];

// The fake environment. EnvLookup is a plain function pointer, hence a static; libFuzzer
// runs one input at a time.
std::string g_values[kVarCount];
bool g_set[kVarCount];

const char* fake_getenv(const char* name) {
  for (int i = 0; i < kVarCount; ++i)
    if (std::strcmp(name, kVars[i]) == 0) return g_set[i] ? g_values[i].c_str() : nullptr;
  return nullptr;
}

// Input layout for config_from: byte 0 is a bit mask of the variables that are set (bit i
// = kVars[i]); then their values in order, each ending at a NUL byte; the rest is the text
// of the rules file. Values therefore never contain NUL, as in a real environment.
std::string_view decode_env(std::string_view in) {
  const unsigned mask = in.empty() ? 0u : static_cast<unsigned char>(in[0]);
  if (!in.empty()) in.remove_prefix(1);
  for (int i = 0; i < kVarCount; ++i) {
    g_set[i] = (mask >> i) & 1u;
    if (!g_set[i]) continue;
    const size_t nul = in.find('\0');
    g_values[i].assign(in.substr(0, nul));
    in.remove_prefix(nul == std::string_view::npos ? in.size() : nul + 1);
  }
  return in;
}

void check_message(const ParseError& err) {
  FUZZ_CHECK(!err.message.empty());
  FUZZ_CHECK(err.message.find('\n') == std::string::npos);
  // Hostile input is quoted at most ~40 bytes at a time: messages stay short.
  FUZZ_CHECK(err.message.size() < 512);
  FUZZ_CHECK(err.message.back() != '.');
}

// A pattern's own network address, at its lowest port, must match it.
void check_pattern(const AddressPattern& p) {
  FUZZ_CHECK(p.port_lo <= p.port_hi);
  sockaddr_storage ss{};
  if (p.family == 0) {
    FUZZ_CHECK(p.prefix_len == 0);
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(p.port_lo);
  } else if (p.family == AF_INET) {
    FUZZ_CHECK(p.prefix_len <= 32);
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(p.port_lo);
    std::memcpy(&in->sin_addr, p.addr, 4);
  } else {
    FUZZ_CHECK(p.family == AF_INET6);
    FUZZ_CHECK(p.prefix_len <= 128);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(p.port_lo);
    std::memcpy(&in6->sin6_addr, p.addr, 16);
  }
  Rule r;
  r.program_glob = "*";
  r.address = p;
  const std::vector<Rule> rules{r};
  FUZZ_CHECK(match_rule(rules, "prog", Direction::client, reinterpret_cast<sockaddr*>(&ss)) ==
             &rules[0]);
}

void check_rules(const std::vector<Rule>& rules) {
  int last_line = 0;
  for (const Rule& r : rules) {
    FUZZ_CHECK(r.line > last_line);
    last_line = r.line;
    FUZZ_CHECK(r.allowed & bit(TransportId::tcp));
    FUZZ_CHECK((r.allowed & ~kAllTransports) == 0);
    FUZZ_CHECK(r.program_glob.find('\0') == std::string::npos);
    check_pattern(r.address);
  }
}

void check_chain(const std::vector<TransportId>& chain) {
  FUZZ_CHECK(!chain.empty());
  FUZZ_CHECK(chain.back() == TransportId::tcp);
  TransportMask seen = 0;
  for (TransportId id : chain) {
    FUZZ_CHECK(unsigned(id) < unsigned(kTransportCount));
    FUZZ_CHECK((seen & bit(id)) == 0);
    seen |= bit(id);
  }
}

// A vendor profile that parsed is consistent, and its address translation stays in bounds.
void check_profile(const vendors::Profile& p, std::string_view in) {
  std::string error;
  FUZZ_CHECK(vendors::validate_profile(p, error));
  FUZZ_CHECK(!p.libraries.empty() && p.libraries.size() <= vendors::kMaxLibraries);
  FUZZ_CHECK((p.optional & vendors::required_entries(p)) == 0);
  for (int i = 0; i < vendors::kEntryCount; ++i)
    FUZZ_CHECK(!vendors::symbol_name(p, vendors::Entry(i)).empty());
  uint8_t bytes[sizeof(sockaddr_in6)] = {};
  std::memcpy(bytes, in.data(), in.size() < sizeof bytes ? in.size() : sizeof bytes);
  for (sa_family_t family : {sa_family_t(AF_INET), sa_family_t(AF_INET6)}) {
    std::memcpy(bytes, &family, sizeof family);
    sockaddr_storage out;
    socklen_t len = 0;
    const int rc = vendors::translate_address(p, reinterpret_cast<const sockaddr*>(bytes),
                                              sizeof bytes, out, len);
    FUZZ_CHECK(rc <= 0);
    if (rc == 0) FUZZ_CHECK(len == (family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)));
  }
}

void check_profiles(const std::vector<vendors::Profile>& profiles, std::string_view in) {
  FUZZ_CHECK(profiles.size() <= vendors::kMaxUserProfiles);
  for (size_t i = 0; i < profiles.size(); ++i) {
    check_profile(profiles[i], in);
    FUZZ_CHECK(profiles[i].line > 0);
    for (size_t j = 0; j < i; ++j) FUZZ_CHECK(profiles[i].name != profiles[j].name);
  }
}

// Peers built from the input's bytes, IPv4, IPv6 and IPv4-mapped, for match_rule.
void match_peers(const std::vector<Rule>& rules, std::string_view in) {
  uint8_t bytes[18] = {};
  std::memcpy(bytes, in.data(), in.size() < sizeof bytes ? in.size() : sizeof bytes);
  uint16_t port;
  std::memcpy(&port, bytes + 16, 2);

  sockaddr_in in4{};
  in4.sin_family = AF_INET;
  in4.sin_port = port;
  std::memcpy(&in4.sin_addr, bytes, 4);

  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = port;
  std::memcpy(&in6.sin6_addr, bytes, 16);

  sockaddr_in6 mapped = in6;
  std::memset(&mapped.sin6_addr, 0, 10);
  std::memset(reinterpret_cast<uint8_t*>(&mapped.sin6_addr) + 10, 0xff, 2);
  std::memcpy(reinterpret_cast<uint8_t*>(&mapped.sin6_addr) + 12, bytes, 4);

  const std::string_view program = in.substr(0, 24);
  for (const sockaddr* sa : {reinterpret_cast<const sockaddr*>(&in4),
                             reinterpret_cast<const sockaddr*>(&in6),
                             reinterpret_cast<const sockaddr*>(&mapped),
                             static_cast<const sockaddr*>(nullptr)}) {
    for (Direction d : {Direction::client, Direction::server, Direction::any}) {
      const Rule* r = match_rule(rules, program, d, sa);
      FUZZ_CHECK(r == nullptr || (r >= rules.data() && r < rules.data() + rules.size()));
    }
  }
  // An IPv4 peer and the same peer IPv4-mapped are the same connection for IPv4 patterns.
  for (const Rule& r : rules) {
    if (r.address.family != AF_INET) continue;
    const std::vector<Rule> one{r};
    const bool a = match_rule(one, "x", r.direction, reinterpret_cast<sockaddr*>(&in4)) != nullptr;
    const bool b =
        match_rule(one, "x", r.direction, reinterpret_cast<sockaddr*>(&mapped)) != nullptr;
    if (r.program_glob == "*") FUZZ_CHECK(a == b);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  ParseError err;

  std::vector<Rule> rules;
  if (parse_rules(in, rules, err)) {
    check_rules(rules);
  } else {
    check_message(err);
    FUZZ_CHECK(rules.empty());
  }

  vendors::Profile profile;
  std::string profile_error;
  if (vendors::parse_profile(in, profile, profile_error)) {
    check_profile(profile, in);
  } else {
    ParseError as_parse_error{0, profile_error};
    check_message(as_parse_error);
  }

  AddressPattern pattern;
  if (parse_address_pattern(in, pattern, err)) check_pattern(pattern);
  else check_message(err);

  std::vector<TransportId> chain;
  if (parse_transport_list(in, chain, err)) {
    check_chain(chain);
  } else {
    check_message(err);
    FUZZ_CHECK(chain.empty());
  }

  LogLevel level;
  if (!parse_log_level(in, level, err)) check_message(err);
  uint32_t spin = 0;
  if (parse_spin_us(in, spin, err)) FUZZ_CHECK(spin <= 1000000);
  else check_message(err);
  bool flag;
  if (!parse_bool(in, flag, err)) check_message(err);
  uint32_t bytes = 0;
  if (parse_ring_max(in, bytes, err))
    FUZZ_CHECK(bytes >= kMinShmRingMax && bytes <= kMaxShmRingMax && (bytes & (bytes - 1)) == 0);
  else check_message(err);
  if (parse_zero_copy_min(in, bytes, err))
    FUZZ_CHECK(bytes >= kMinVerbsZeroCopyMin && bytes <= kMaxVerbsZeroCopyMin);
  else check_message(err);

  const std::string_view rules_text = decode_env(in);
  const Config c = config_from(fake_getenv, rules_text);
  if (c.pass_through_forced) {
    FUZZ_CHECK(!c.error.empty());
    FUZZ_CHECK(c.error.find('\n') == std::string::npos);
    FUZZ_CHECK(c.chain.size() == 1 && c.chain[0] == TransportId::tcp);
    FUZZ_CHECK(c.rules.empty());
    FUZZ_CHECK(c.vendor_profiles.empty());
    FUZZ_CHECK(c.log_level == LogLevel::warn && c.log_file.empty());  // defaults: stderr
    FUZZ_CHECK(c.shm_ring_max == kDefaultShmRingMax);
    FUZZ_CHECK(c.verbs_zero_copy_min == kDefaultVerbsZeroCopyMin);
  } else {
    FUZZ_CHECK(c.error.empty());
    check_chain(c.chain);
    check_rules(c.rules);
    check_profiles(c.vendor_profiles, rules_text);
  }
  match_peers(c.rules, rules_text);
  match_peers(rules, in);
  return 0;
}
