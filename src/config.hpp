// Configuration: environment variables and the optional rules file (docs/configuration.md).
//
// Parsing is pure (no I/O, no globals) so that unit tests and the fuzzer drive it directly;
// config_load.cc does the I/O once per process. A malformed setting yields an error and the
// library falls back to pass-through: it never aborts the host program.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "transport_id.hpp"
#include "vendor_profile.hpp"

// Declared at global scope so that `struct sockaddr` below names ::sockaddr, not a new
// incomplete fastsock::sockaddr, even when <sys/socket.h> is included after this header.
struct sockaddr;

namespace fastsock {

enum class LogLevel : uint8_t { off, error, warn, info, debug, trace };
std::string_view log_level_name(LogLevel);

// Which side of a connection a rule applies to: `client` = connections this process
// connect()s, `server` = connections it accept()s (and its listening sockets).
enum class Direction : uint8_t { any, client, server };

// An address pattern: family 0 matches any family; prefix_len is in bits; ports inclusive.
struct AddressPattern {
  int family = 0;               // 0 (any), AF_INET or AF_INET6
  uint8_t addr[16] = {};        // network byte order; IPv4 uses the first 4 bytes
  uint8_t prefix_len = 0;       // 0 = any address
  uint16_t port_lo = 0;         // host byte order; 0..65535 = any port
  uint16_t port_hi = 65535;
};

// One line of the rules file:
//   use <transport>[,<transport>...] <client|server|any> <program-glob> <address-pattern>
struct Rule {
  TransportMask allowed = 0;
  Direction direction = Direction::any;
  std::string program_glob;     // fnmatch(3) pattern against the program's short name
  AddressPattern address;
  int line = 0;                 // 1-based line number in the rules file, for messages
};

struct ParseError {
  int line = 0;                 // 0 when the error is not tied to a line
  std::string message;          // one sentence, no trailing newline
};

// FASTSOCK_SHM_RING_MAX: a power of two between one page and the shm protocol's bound
// (shm_layout.hpp's kMinWindow and kMaxWindowLimit, checked where the link uses it); the
// default is the one the shm figures were measured with (docs/configuration.md).
inline constexpr uint32_t kMinShmRingMax = 4u << 10;
inline constexpr uint32_t kMaxShmRingMax = 64u << 20;
inline constexpr uint32_t kDefaultShmRingMax = 1u << 20;
// FASTSOCK_VERBS_ZERO_COPY_MIN: from one full message of the verbs link (its 16 KiB receive
// slot, the unit zero-copy sends in) up; docs/verbs.md, "Zero-copy sends", says why the
// default.
inline constexpr uint32_t kMinVerbsZeroCopyMin = 16u << 10;
inline constexpr uint32_t kMaxVerbsZeroCopyMin = 64u << 20;
inline constexpr uint32_t kDefaultVerbsZeroCopyMin = 64u << 10;

struct Config {
  // The failover chain in order of preference; tcp is always present and always last.
  std::vector<TransportId> chain{TransportId::shm, TransportId::verbs, TransportId::vendor,
                                 TransportId::tcp};
  LogLevel log_level = LogLevel::warn;
  std::string log_file;         // empty: stderr
  uint32_t spin_us = 50;        // busy-wait budget before sleeping (transports that wait)
  bool spin_adapt = true;       // a thread whose spins run out spins less (link_io::SpinHistory)
  // How far an shm ring this process writes may grow (FASTSOCK_SHM_RING_MAX), bytes.
  uint32_t shm_ring_max = kDefaultShmRingMax;
  bool stats_enabled = true;    // publish /dev/shm/fastsock-stats.<pid> for `fastsock stat`
  bool zerocopy = false;        // MSG_ZEROCOPY for large typed sends on TCP (api_zerocopy.hpp)
  bool verbs_zero_copy = true;  // large blocking sends on the verbs link from the caller's buffer
  uint32_t verbs_zero_copy_min = kDefaultVerbsZeroCopyMin;  // ... of at least this many bytes
  bool fd_budget = true;        // links with descriptors of their own leave half (fd_budget.hpp)
  std::string rules_path;       // empty: no rules file
  std::vector<Rule> rules;
  // `vendor` lines of the rules file: profiles of vendor socket libraries, tried before the
  // built-in ones (transports/vendor/vendor_profile.hpp).
  std::vector<vendors::Profile> vendor_profiles;
  // Set when any setting was malformed: the process runs in pass-through (tcp only).
  bool pass_through_forced = false;
  std::string error;            // the message printed for that, once
};

// Parses FASTSOCK_TRANSPORTS. Names are comma-separated, no duplicates; `tcp` may be
// omitted (it is appended) but, if given, must be last. Empty string is an error.
bool parse_transport_list(std::string_view text, std::vector<TransportId>& out, ParseError& err);
TransportMask mask_of(const std::vector<TransportId>& list);

bool parse_log_level(std::string_view text, LogLevel& out, ParseError& err);
// A decimal integer in [0, 1000000] (microseconds).
bool parse_spin_us(std::string_view text, uint32_t& out, ParseError& err);
bool parse_bool(std::string_view text, bool& out, ParseError& err);
// A byte count for FASTSOCK_SHM_RING_MAX: digits, optionally followed by K, KiB, M or MiB
// (binary, any case), a power of two in [kMinShmRingMax, kMaxShmRingMax].
bool parse_ring_max(std::string_view text, uint32_t& out, ParseError& err);
// FASTSOCK_VERBS_ZERO_COPY_MIN: the same notation, any count in [kMinVerbsZeroCopyMin,
// kMaxVerbsZeroCopyMin].
bool parse_zero_copy_min(std::string_view text, uint32_t& out, ParseError& err);
// "*", "*:6379", "127.0.0.1", "10.0.0.0/8:1000-2000", "[::1]:80", "[fe80::/10]:*", ...
bool parse_address_pattern(std::string_view text, AddressPattern& out, ParseError& err);
// The whole rules file. Blank lines and '#' comments are ignored. `vendor` lines are
// validated and, when `profiles` is given, stored there (at most
// vendors::kMaxUserProfiles, names unique).
bool parse_rules(std::string_view text, std::vector<Rule>& out, ParseError& err,
                 std::vector<vendors::Profile>* profiles = nullptr);

// Builds a Config from an environment lookup (getenv-like: returns nullptr when unset) and
// the rules file contents (the caller reads the file named by FASTSOCK_RULES). On any error
// the returned Config has pass_through_forced set, chain == {tcp} and `error` filled in.
using EnvLookup = const char* (*)(const char* name);
Config config_from(EnvLookup env, std::string_view rules_text);

// The first rule matching (program, direction, address) or nullptr.
// `sa` is a sockaddr_in or sockaddr_in6; IPv4-mapped IPv6 addresses match IPv4 patterns.
const Rule* match_rule(const std::vector<Rule>& rules, std::string_view program,
                       Direction direction, const struct sockaddr* sa);

}  // namespace fastsock
