// Parsing of the FASTSOCK_* environment variables and the rules file (docs/configuration.md).
//
// Everything here is pure: the caller hands in the environment lookup and the text of the
// rules file, so the unit tests and the fuzzer (tests/fuzz/) exercise exactly the code the
// library runs. Input is untrusted: every message quotes at most kQuoteMax bytes of it,
// with control bytes escaped, so an error stays one readable line.
#include "config.hpp"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <optional>

#include "quote.hpp"

namespace fastsock {
namespace {

constexpr size_t kMaxRulesBytes = 1u << 20;    // 1 MiB
constexpr size_t kMaxRules = 10000;
constexpr size_t kMaxGlobBytes = 255;          // NAME_MAX: a program name is never longer
constexpr uint32_t kMaxSpinUs = 1000000;
constexpr std::string_view kValidTransports = "shm, verbs, vendor, tcp";
constexpr std::string_view kRuleSyntax =
    "use <transport>[,<transport>...] <client|server|any> <program-glob> <address-pattern>";
constexpr std::string_view kLineKinds =
    "a line is a rule, 'use ...', or a vendor library profile, 'vendor <name> ...'";

bool is_blank(char c) { return c == ' ' || c == '\t'; }
char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

bool fail(ParseError& err, std::string message, int line = 0) {
  err.line = line;
  err.message = std::move(message);
  return false;
}

// A decimal number made of digits only, at most `max`. Rejects signs, spaces and overflow.
bool parse_uint(std::string_view text, uint32_t max, uint32_t& out) {
  if (text.empty() || text.size() > 10) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (!is_digit(c)) return false;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > max) return false;
  out = uint32_t(v);
  return true;
}

std::optional<TransportId> transport_from_any_case(std::string_view name) {
  for (int i = 0; i < kTransportCount; ++i)
    if (iequals(transport_name(TransportId(i)), name)) return TransportId(i);
  return std::nullopt;
}

// Splits a comma-separated transport list into ids, rejecting empty items, unknown names
// and duplicates. `allow_spaces`: the environment variable tolerates spaces around commas;
// in a rule, whitespace separates fields, so the list cannot contain any.
bool split_transports(std::string_view text, bool allow_spaces, std::vector<TransportId>& out,
                      ParseError& err) {
  out.clear();
  if (trim(text).empty()) return fail(err, "the transport list is empty");
  TransportMask seen = 0;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : comma - start);
    if (allow_spaces) item = trim(item);
    if (item.empty())
      return fail(err, "empty item in the transport list " + quote(text));
    const auto id = transport_from_any_case(item);
    if (!id)
      return fail(err, "unknown transport " + quote(item) + " (valid: " +
                           std::string(kValidTransports) + ")");
    if (seen & bit(*id))
      return fail(err, "transport '" + std::string(transport_name(*id)) +
                           "' is listed more than once");
    seen |= bit(*id);
    out.push_back(*id);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return true;
}

// Port part of an address pattern: "*", "N" or "N-M" with N <= M.
bool parse_ports(std::string_view text, AddressPattern& p, std::string_view whole,
                 ParseError& err) {
  if (text == "*") {
    p.port_lo = 0;
    p.port_hi = 65535;
    return true;
  }
  const size_t dash = text.find('-');
  uint32_t lo = 0, hi = 0;
  bool ok;
  if (dash == std::string_view::npos) {
    ok = parse_uint(text, 65535, lo);
    hi = lo;
  } else {
    ok = parse_uint(text.substr(0, dash), 65535, lo) &&
         parse_uint(text.substr(dash + 1), 65535, hi);
  }
  if (!ok)
    return fail(err, "invalid port " + quote(text) + " in address pattern " + quote(whole) +
                         " (expected *, N or N-M with 0 <= N <= M <= 65535)");
  if (lo > hi)
    return fail(err, "empty port range " + quote(text) + " in address pattern " +
                         quote(whole) + " (the first port must not exceed the second)");
  p.port_lo = uint16_t(lo);
  p.port_hi = uint16_t(hi);
  return true;
}

// "<ip>[/<prefix>]" for one family; the address is masked to its prefix.
bool parse_ip_prefix(std::string_view text, int family, AddressPattern& p,
                     std::string_view whole, ParseError& err) {
  const unsigned max_bits = family == AF_INET ? 32 : 128;
  const char* family_name = family == AF_INET ? "IPv4" : "IPv6";
  const size_t slash = text.find('/');
  const std::string_view ip = text.substr(0, slash);
  uint32_t prefix = max_bits;
  if (slash != std::string_view::npos &&
      !parse_uint(text.substr(slash + 1), max_bits, prefix))
    return fail(err, "invalid prefix length " + quote(text.substr(slash + 1)) +
                         " in address pattern " + quote(whole) + " (expected 0 to " +
                         std::to_string(max_bits) + ")");
  // inet_pton wants a NUL-terminated string; nothing valid is longer than this buffer.
  char buf[INET6_ADDRSTRLEN + 1] = {};
  uint8_t addr[16] = {};
  if (ip.empty() || ip.size() >= sizeof buf ||
      (std::memcpy(buf, ip.data(), ip.size()), inet_pton(family, buf, addr) != 1))
    return fail(err, "invalid " + std::string(family_name) + " address " + quote(ip) +
                         " in address pattern " + quote(whole));
  for (unsigned i = 0; i < 16; ++i) {
    const unsigned bits_before = i * 8;
    if (bits_before >= prefix) addr[i] = 0;
    else if (prefix - bits_before < 8) addr[i] &= uint8_t(0xff00u >> (prefix - bits_before));
  }
  p.family = family;
  std::memcpy(p.addr, addr, sizeof p.addr);
  p.prefix_len = uint8_t(prefix);
  return true;
}

// True when the first `bits` bits of a and b are equal.
bool prefix_equal(const uint8_t* a, const uint8_t* b, unsigned bits) {
  const unsigned whole = bits / 8, rest = bits % 8;
  if (std::memcmp(a, b, whole) != 0) return false;
  if (rest == 0) return true;
  const uint8_t mask = uint8_t(0xff00u >> rest);
  return (a[whole] & mask) == (b[whole] & mask);
}

// The peer as seen by the matcher: its IPv4 form when it has one (AF_INET, or an IPv4-mapped
// IPv6 address), its IPv6 form when it is AF_INET6.
struct Peer {
  bool has_v4 = false, has_v6 = false;
  uint8_t v4[4] = {};
  uint8_t v6[16] = {};
  uint16_t port = 0;
};

bool peer_from(const struct sockaddr* sa, Peer& peer) {
  if (sa == nullptr) return false;
  const sa_family_t family = sa->sa_family;
  // The caller's storage may be a plain sockaddr buffer: copy rather than cast.
  if (family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, sa, sizeof in);
    std::memcpy(peer.v4, &in.sin_addr, 4);
    peer.has_v4 = true;
    peer.port = ntohs(in.sin_port);
    return true;
  }
  if (family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, sa, sizeof in6);
    std::memcpy(peer.v6, &in6.sin6_addr, 16);
    peer.has_v6 = true;
    static constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(peer.v6, kMappedPrefix, 12) == 0) {
      std::memcpy(peer.v4, peer.v6 + 12, 4);
      peer.has_v4 = true;
    }
    peer.port = ntohs(in6.sin6_port);
    return true;
  }
  return false;
}

bool address_matches(const AddressPattern& p, const struct sockaddr* sa) {
  Peer peer;
  if (!peer_from(sa, peer))
    return p.family == 0 && p.port_lo == 0 && p.port_hi == 65535;  // only "*" matches
  if (peer.port < p.port_lo || peer.port > p.port_hi) return false;
  switch (p.family) {
    case 0: return true;
    case AF_INET: return peer.has_v4 && prefix_equal(peer.v4, p.addr, p.prefix_len);
    case AF_INET6: return peer.has_v6 && prefix_equal(peer.v6, p.addr, p.prefix_len);
  }
  return false;
}

bool program_matches(const std::string& glob, std::string_view program) {
  char buf[kMaxGlobBytes + 1];
  if (program.size() < sizeof buf) {
    std::memcpy(buf, program.data(), program.size());
    buf[program.size()] = '\0';
    return fnmatch(glob.c_str(), buf, 0) == 0;
  }
  return fnmatch(glob.c_str(), std::string(program).c_str(), 0) == 0;
}

// One non-blank, comment-stripped line of the rules file, split into fields.
bool parse_rule_line(std::string_view line, int line_no, Rule& rule, ParseError& err) {
  std::string_view fields[5];
  size_t count = 0;
  size_t i = 0;
  while (true) {
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i == line.size()) break;
    const size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    const std::string_view field = line.substr(start, i - start);
    if (count == 5)
      return fail(err, "unexpected extra field " + quote(field) + " after the address pattern",
                  line_no);
    fields[count++] = field;
  }
  if (!iequals(fields[0], "use"))
    return fail(err, "unknown keyword " + quote(fields[0]) + " (" + std::string(kLineKinds) +
                         ")",
                line_no);
  if (count != 5)
    return fail(err, "incomplete rule with " + std::to_string(count) +
                         " fields (a rule reads: " + std::string(kRuleSyntax) + ")",
                line_no);

  std::vector<TransportId> list;
  if (!split_transports(fields[1], false, list, err)) return fail(err, err.message, line_no);
  rule.allowed = TransportMask(mask_of(list) | bit(TransportId::tcp));

  const std::string_view dir = fields[2];
  if (iequals(dir, "client")) rule.direction = Direction::client;
  else if (iequals(dir, "server")) rule.direction = Direction::server;
  else if (iequals(dir, "any")) rule.direction = Direction::any;
  else
    return fail(err, "unknown direction " + quote(dir) + " (valid: client, server, any)",
                line_no);

  if (fields[3].size() > kMaxGlobBytes)
    return fail(err, "program pattern " + quote(fields[3]) + " is longer than " +
                         std::to_string(kMaxGlobBytes) + " bytes",
                line_no);
  rule.program_glob.assign(fields[3]);

  if (!parse_address_pattern(fields[4], rule.address, err))
    return fail(err, err.message, line_no);
  rule.line = line_no;
  return true;
}

// The fields after the keyword when `line` is a `vendor` line (keyword case-insensitive, as
// `use` is).
std::optional<std::string_view> vendor_line(std::string_view line) {
  const std::string_view t = trim(line);
  size_t end = 0;
  while (end < t.size() && !is_blank(t[end])) ++end;
  if (!iequals(t.substr(0, end), "vendor")) return std::nullopt;
  return t.substr(end);
}

// A `vendor <name> key=value ...` line: a profile of a vendor socket library.
bool parse_vendor_line(std::string_view rest, int line_no,
                       std::vector<vendors::Profile>& profiles, ParseError& err) {
  vendors::Profile p;
  std::string message;
  if (!vendors::parse_profile(rest, p, message)) return fail(err, message, line_no);
  for (const vendors::Profile& q : profiles)
    if (q.name == p.name)
      return fail(err, "vendor profile '" + p.name + "' is defined twice (first on line " +
                           std::to_string(q.line) + ")",
                  line_no);
  if (profiles.size() == vendors::kMaxUserProfiles)
    return fail(err, "too many vendor profiles (the limit is " +
                         std::to_string(vendors::kMaxUserProfiles) + ")",
                line_no);
  p.line = line_no;
  profiles.push_back(std::move(p));
  return true;
}

// Control bytes other than tab have no place in a rules file; rejecting them keeps NULs
// out of the glob (which fnmatch would silently cut) and garbage out of messages.
const char* find_control(std::string_view line) {
  for (const char& c : line) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return &c;
  }
  return nullptr;
}

}  // namespace

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::off: return "off";
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
    case LogLevel::trace: return "trace";
  }
  return "?";
}

bool parse_transport_list(std::string_view text, std::vector<TransportId>& out,
                          ParseError& err) {
  std::vector<TransportId> list;
  if (!split_transports(text, true, list, err)) return false;
  for (size_t i = 0; i + 1 < list.size(); ++i)
    if (list[i] == TransportId::tcp)
      return fail(err, "'tcp' must be last in the transport list " + quote(text) +
                           " (it is the fallback)");
  if (list.back() != TransportId::tcp) list.push_back(TransportId::tcp);
  out = std::move(list);
  return true;
}

TransportMask mask_of(const std::vector<TransportId>& list) {
  TransportMask mask = 0;
  for (TransportId id : list) mask = TransportMask(mask | bit(id));
  return mask;
}

bool parse_log_level(std::string_view text, LogLevel& out, ParseError& err) {
  const std::string_view t = trim(text);
  for (int i = 0; i <= int(LogLevel::trace); ++i) {
    if (iequals(t, log_level_name(LogLevel(i)))) {
      out = LogLevel(i);
      return true;
    }
  }
  return fail(err, "unknown log level " + quote(text) +
                       " (valid: off, error, warn, info, debug, trace)");
}

bool parse_spin_us(std::string_view text, uint32_t& out, ParseError& err) {
  uint32_t v = 0;
  if (!parse_uint(trim(text), kMaxSpinUs, v))
    return fail(err, "invalid spin time " + quote(text) +
                         " (expected a whole number of microseconds from 0 to 1000000)");
  out = v;
  return true;
}

namespace {

// Digits, optionally followed by K, KiB, M or MiB (binary, any case): the byte count, or 0
// when the text is not one (or above `max`).
uint64_t parse_byte_count(std::string_view text, uint32_t max) {
  const std::string_view t = trim(text);
  size_t digits = 0;
  while (digits < t.size() && is_digit(t[digits])) ++digits;
  const std::string_view unit = t.substr(digits);
  uint32_t shift = 0;
  if (iequals(unit, "k") || iequals(unit, "kib")) shift = 10;
  else if (iequals(unit, "m") || iequals(unit, "mib")) shift = 20;
  else if (!unit.empty()) return 0;  // not a unit
  uint32_t n = 0;
  if (!parse_uint(t.substr(0, digits), max, n)) return 0;
  const uint64_t bytes = uint64_t{n} << shift;
  return bytes <= max ? bytes : 0;
}

}  // namespace

bool parse_ring_max(std::string_view text, uint32_t& out, ParseError& err) {
  const uint64_t bytes = parse_byte_count(text, kMaxShmRingMax);
  if (bytes < kMinShmRingMax || (bytes & (bytes - 1)) != 0)
    return fail(err, "invalid ring size " + quote(text) +
                         " (expected a power of two from 4K to 64M, e.g. 1M, 4MiB, 262144)");
  out = uint32_t(bytes);
  return true;
}

bool parse_zero_copy_min(std::string_view text, uint32_t& out, ParseError& err) {
  const uint64_t bytes = parse_byte_count(text, kMaxVerbsZeroCopyMin);
  if (bytes < kMinVerbsZeroCopyMin)
    return fail(err, "invalid size " + quote(text) +
                         " (expected 16K to 64M, e.g. 64K, 1MiB, 131072)");
  out = uint32_t(bytes);
  return true;
}

bool parse_bool(std::string_view text, bool& out, ParseError& err) {
  const std::string_view t = trim(text);
  for (std::string_view yes : {"1", "yes", "true", "on"})
    if (iequals(t, yes)) return out = true, true;
  for (std::string_view no : {"0", "no", "false", "off"})
    if (iequals(t, no)) return out = false, true;
  return fail(err, "invalid boolean " + quote(text) +
                       " (valid: 1, 0, yes, no, true, false, on, off)");
}

bool parse_address_pattern(std::string_view text, AddressPattern& out, ParseError& err) {
  AddressPattern p;
  if (text.empty()) return fail(err, "empty address pattern");
  if (text == "*") {
    out = p;
    return true;
  }
  if (text.substr(0, 2) == "*:") {
    if (!parse_ports(text.substr(2), p, text, err)) return false;
    out = p;
    return true;
  }
  std::string_view ports;
  bool has_ports = false;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos)
      return fail(err, "missing ']' in address pattern " + quote(text));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return fail(err, "unexpected " + quote(rest) + " after ']' in address pattern " +
                             quote(text) + " (expected ':<ports>')");
      ports = rest.substr(1);
      has_ports = true;
    }
    if (!parse_ip_prefix(text.substr(1, close - 1), AF_INET6, p, text, err)) return false;
  } else {
    const size_t colon = text.find(':');
    if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos)
      return fail(err, "invalid address pattern " + quote(text) +
                           " (write IPv6 addresses in brackets, e.g. [::1]:80)");
    if (colon != std::string_view::npos) {
      ports = text.substr(colon + 1);
      has_ports = true;
    }
    if (!parse_ip_prefix(text.substr(0, colon), AF_INET, p, text, err)) return false;
  }
  if (has_ports && !parse_ports(ports, p, text, err)) return false;
  out = p;
  return true;
}

bool parse_rules(std::string_view text, std::vector<Rule>& out, ParseError& err,
                 std::vector<vendors::Profile>* profiles_out) {
  if (text.size() > kMaxRulesBytes)
    return fail(err, "the rules file is larger than 1 MiB (" + std::to_string(text.size()) +
                         " bytes)");
  std::vector<Rule> rules;
  std::vector<vendors::Profile> profiles;
  int line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    ++line_no;
    const size_t nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : nl - start);
    start = nl == std::string_view::npos ? text.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files
    line = line.substr(0, line.find('#'));
    if (const char* c = find_control(line))
      return fail(err, "control character " + quote(std::string_view(c, 1)) + " in the line",
                  line_no);
    if (trim(line).empty()) continue;
    if (const auto rest = vendor_line(line)) {
      if (!parse_vendor_line(*rest, line_no, profiles, err)) return false;
      continue;
    }
    if (rules.size() == kMaxRules)
      return fail(err, "too many rules (the limit is " + std::to_string(kMaxRules) + ")",
                  line_no);
    Rule rule;
    if (!parse_rule_line(line, line_no, rule, err)) return false;
    rules.push_back(std::move(rule));
  }
  out = std::move(rules);
  if (profiles_out) *profiles_out = std::move(profiles);
  return true;
}

Config config_from(EnvLookup env, std::string_view rules_text) {
  Config c;
  std::string first_error;  // only the first malformed setting is reported; parsing goes
                            // on so that every variable is at least validated
  auto report = [&](const char* name, const ParseError& e) {
    if (!first_error.empty()) return;
    first_error = e.line > 0 ? "rules file line " + std::to_string(e.line) + ": " + e.message
                             : std::string(name) + ": " + e.message;
  };
  ParseError e;

  if (const char* v = env("FASTSOCK_TRANSPORTS"))
    if (!parse_transport_list(v, c.chain, e)) report("FASTSOCK_TRANSPORTS", e);
  if (const char* v = env("FASTSOCK_LOG"))
    if (!parse_log_level(v, c.log_level, e)) report("FASTSOCK_LOG", e);
  if (const char* v = env("FASTSOCK_LOG_FILE")) {
    if (*v == '\0') report("FASTSOCK_LOG_FILE", {0, "the path is empty"});
    else c.log_file = v;
  }
  if (const char* v = env("FASTSOCK_SPIN_US"))
    if (!parse_spin_us(v, c.spin_us, e)) report("FASTSOCK_SPIN_US", e);
  if (const char* v = env("FASTSOCK_SPIN_ADAPT"))
    if (!parse_bool(v, c.spin_adapt, e)) report("FASTSOCK_SPIN_ADAPT", e);
  if (const char* v = env("FASTSOCK_SHM_RING_MAX"))
    if (!parse_ring_max(v, c.shm_ring_max, e)) report("FASTSOCK_SHM_RING_MAX", e);
  if (const char* v = env("FASTSOCK_STATS"))
    if (!parse_bool(v, c.stats_enabled, e)) report("FASTSOCK_STATS", e);
  if (const char* v = env("FASTSOCK_ZEROCOPY"))
    if (!parse_bool(v, c.zerocopy, e)) report("FASTSOCK_ZEROCOPY", e);
  if (const char* v = env("FASTSOCK_VERBS_ZERO_COPY"))
    if (!parse_bool(v, c.verbs_zero_copy, e)) report("FASTSOCK_VERBS_ZERO_COPY", e);
  if (const char* v = env("FASTSOCK_VERBS_ZERO_COPY_MIN"))
    if (!parse_zero_copy_min(v, c.verbs_zero_copy_min, e)) report("FASTSOCK_VERBS_ZERO_COPY_MIN", e);
  if (const char* v = env("FASTSOCK_FD_BUDGET"))
    if (!parse_bool(v, c.fd_budget, e)) report("FASTSOCK_FD_BUDGET", e);
  if (const char* v = env("FASTSOCK_RULES")) {
    if (*v == '\0') {
      report("FASTSOCK_RULES", {0, "the path is empty"});
    } else {
      c.rules_path = v;
      if (!parse_rules(rules_text, c.rules, e, &c.vendor_profiles)) report("FASTSOCK_RULES", e);
    }
  }

  if (!first_error.empty()) {
    // Pass-through with every other setting at its default too: the message then always
    // reaches stderr (level error, default destination), whatever FASTSOCK_LOG and
    // FASTSOCK_LOG_FILE say, and no connection leaves kernel TCP.
    c = Config{};
    c.chain = {TransportId::tcp};
    c.pass_through_forced = true;
    c.error = std::move(first_error);
  }
  return c;
}

const Rule* match_rule(const std::vector<Rule>& rules, std::string_view program,
                       Direction direction, const struct sockaddr* sa) {
  for (const Rule& r : rules) {
    if (r.direction != Direction::any && r.direction != direction) continue;
    if (!address_matches(r.address, sa)) continue;  // cheaper than fnmatch: test first
    if (!program_matches(r.program_glob, program)) continue;
    return &r;
  }
  return nullptr;
}

}  // namespace fastsock
