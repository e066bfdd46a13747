// Unit tests for src/config.cc: every parser on valid and malformed input, config_from with
// a fake environment, and rule matching.
//
// config.hpp comes first on purpose: it must compile, and match_rule must take ::sockaddr,
// without <sys/socket.h> included before it.
#include "config.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>

using namespace fastsock;

namespace {

using Chain = std::vector<TransportId>;
constexpr TransportId shm = TransportId::shm, verbs = TransportId::verbs,
                      vendor = TransportId::vendor, tcp = TransportId::tcp;

// The fake environment config_from reads: EnvLookup is a plain function pointer, so the
// table is a static that each test fills before calling config_from.
std::map<std::string, std::string>& fake_env() {
  static std::map<std::string, std::string> table;
  return table;
}
const char* fake_getenv(const char* name) {
  auto it = fake_env().find(name);
  return it == fake_env().end() ? nullptr : it->second.c_str();
}
Config config_with(std::map<std::string, std::string> vars, std::string_view rules = {}) {
  fake_env() = std::move(vars);
  return config_from(fake_getenv, rules);
}

Chain chain_of(std::string_view text) {
  Chain out;
  ParseError err;
  INFO("transport list: " << text);
  REQUIRE(parse_transport_list(text, out, err));
  return out;
}
std::string transport_error(std::string_view text) {
  Chain out{shm};
  ParseError err;
  CHECK_FALSE(parse_transport_list(text, out, err));
  CHECK(out == Chain{shm});  // untouched on failure
  return err.message;
}

AddressPattern pattern(std::string_view text) {
  AddressPattern p;
  ParseError err;
  const bool ok = parse_address_pattern(text, p, err);
  INFO("address pattern: " << text << " -> " << err.message);
  REQUIRE(ok);
  return p;
}
std::string pattern_error(std::string_view text) {
  AddressPattern p;
  ParseError err;
  INFO("address pattern: " << text);
  CHECK_FALSE(parse_address_pattern(text, p, err));
  CHECK_FALSE(err.message.empty());
  return err.message;
}

std::vector<Rule> rules_of(std::string_view text) {
  std::vector<Rule> out;
  ParseError err;
  const bool ok = parse_rules(text, out, err);
  INFO("rules parse error: line " << err.line << ": " << err.message);
  REQUIRE(ok);
  return out;
}
ParseError rules_error(std::string_view text) {
  std::vector<Rule> out;
  ParseError err;
  CHECK_FALSE(parse_rules(text, out, err));
  CHECK_FALSE(err.message.empty());
  return err;
}

// A peer address as the hooks would see it.
struct Addr {
  sockaddr_storage ss{};
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&ss); }
};
Addr v4(const char* ip, uint16_t port) {
  Addr a;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  REQUIRE(inet_pton(AF_INET, ip, &in.sin_addr) == 1);
  std::memcpy(&a.ss, &in, sizeof in);
  return a;
}
Addr v6(const char* ip, uint16_t port) {
  Addr a;
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  REQUIRE(inet_pton(AF_INET6, ip, &in6.sin6_addr) == 1);
  std::memcpy(&a.ss, &in6, sizeof in6);
  return a;
}

// Whether a rules file made of one rule matches the given connection.
bool one_rule_matches(std::string_view rule, std::string_view program, Direction dir,
                      const Addr& peer) {
  const auto rules = rules_of(rule);
  REQUIRE(rules.size() == 1);
  return match_rule(rules, program, dir, peer.sa()) == &rules[0];
}
bool address_matches(std::string_view address, const Addr& peer) {
  return one_rule_matches("use shm any * " + std::string(address), "prog", Direction::client,
                          peer);
}

}  // namespace

TEST_CASE("transport list: valid forms", "[config][transports]") {
  CHECK(chain_of("shm,verbs,vendor,tcp") == Chain{shm, verbs, vendor, tcp});
  CHECK(chain_of("tcp") == Chain{tcp});
  // tcp may be omitted: it is appended, since it is always the fallback.
  CHECK(chain_of("shm") == Chain{shm, tcp});
  CHECK(chain_of("verbs,shm") == Chain{verbs, shm, tcp});
  CHECK(chain_of("vendor") == Chain{vendor, tcp});
  // Spaces and tabs around commas and around the whole value are tolerated.
  CHECK(chain_of(" shm , verbs,\ttcp ") == Chain{shm, verbs, tcp});
  CHECK(chain_of("SHM,Tcp") == Chain{shm, tcp});
}

TEST_CASE("transport list: malformed input", "[config][transports]") {
  CHECK(transport_error("") == "the transport list is empty");
  CHECK(transport_error("  ") == "the transport list is empty");
  CHECK(transport_error("foo") == "unknown transport 'foo' (valid: shm, verbs, vendor, tcp)");
  CHECK(transport_error("shm,foo,tcp") ==
        "unknown transport 'foo' (valid: shm, verbs, vendor, tcp)");
  CHECK(transport_error("shm,,tcp").find("empty item") != std::string::npos);
  CHECK(transport_error("shm,").find("empty item") != std::string::npos);
  CHECK(transport_error(",shm").find("empty item") != std::string::npos);
  CHECK(transport_error("shm,shm") == "transport 'shm' is listed more than once");
  CHECK(transport_error("tcp,tcp") == "transport 'tcp' is listed more than once");
  CHECK(transport_error("tcp,shm").find("'tcp' must be last") != std::string::npos);
  CHECK(transport_error("shm tcp").find("unknown transport 'shm tcp'") != std::string::npos);
}

TEST_CASE("transport list: hostile input is quoted short and escaped", "[config][transports]") {
  const std::string msg = transport_error(std::string(5000, 'x'));
  CHECK(msg.size() < 120);
  CHECK(msg.find("'" + std::string(40, 'x') + "...'") != std::string::npos);
  const std::string ctl = transport_error(std::string("a\nb\x01'", 5));
  CHECK(ctl.find("'a\\x0ab\\x01\\x27'") != std::string::npos);
  CHECK(ctl.find('\n') == std::string::npos);
}

TEST_CASE("mask_of sets one bit per transport", "[config][transports]") {
  CHECK(mask_of({}) == 0);
  CHECK(mask_of({tcp}) == bit(tcp));
  CHECK(mask_of({shm, verbs, vendor, tcp}) == kAllTransports);
  CHECK(mask_of({verbs, tcp}) == (bit(verbs) | bit(tcp)));
}

TEST_CASE("log level", "[config][log]") {
  ParseError err;
  LogLevel level = LogLevel::warn;
  const std::pair<const char*, LogLevel> valid[] = {
      {"off", LogLevel::off},     {"error", LogLevel::error}, {"warn", LogLevel::warn},
      {"info", LogLevel::info},   {"debug", LogLevel::debug}, {"trace", LogLevel::trace},
      {"DEBUG", LogLevel::debug}, {"Trace", LogLevel::trace}, {" info ", LogLevel::info}};
  for (const auto& [text, expected] : valid) {
    INFO(text);
    level = LogLevel::warn == expected ? LogLevel::off : LogLevel::warn;
    CHECK(parse_log_level(text, level, err));
    CHECK(level == expected);
  }
  for (const char* bad : {"", "verbose", "warning", "3", "de bug"}) {
    INFO(bad);
    level = LogLevel::info;
    CHECK_FALSE(parse_log_level(bad, level, err));
    CHECK(level == LogLevel::info);
    CHECK(err.message.find("(valid: off, error, warn, info, debug, trace)") !=
          std::string::npos);
  }
  CHECK(log_level_name(LogLevel::off) == "off");
  CHECK(log_level_name(LogLevel::trace) == "trace");
}

TEST_CASE("spin time", "[config][spin]") {
  ParseError err;
  uint32_t us = 7;
  CHECK(parse_spin_us("0", us, err));
  CHECK(us == 0);
  CHECK(parse_spin_us("50", us, err));
  CHECK(us == 50);
  CHECK(parse_spin_us("1000000", us, err));
  CHECK(us == 1000000);
  CHECK(parse_spin_us("007", us, err));
  CHECK(us == 7);
  for (const char* bad : {"", "1000001", "-1", "+5", "1e3", "12us", "0x10", "99999999999999999999",
                          "4294967296", "1 2"}) {
    INFO(bad);
    us = 42;
    CHECK_FALSE(parse_spin_us(bad, us, err));
    CHECK(us == 42);
    CHECK(err.message.find("invalid spin time") != std::string::npos);
  }
}

TEST_CASE("shm ring cap", "[config][ring]") {
  ParseError err;
  uint32_t bytes = 7;
  const std::pair<const char*, uint32_t> good[] = {
      {"4096", 4096},   {"4K", 4096},          {"4k", 4096},         {"16KiB", 16384},
      {" 1M ", 1u << 20}, {"4MiB", 4u << 20},  {"4mib", 4u << 20},   {"64M", 64u << 20},
      {"67108864", 64u << 20}, {"0004K", 4096}};
  for (const auto& [text, want] : good) {
    INFO(text);
    CHECK(parse_ring_max(text, bytes, err));
    CHECK(bytes == want);
  }
  // Not a power of two, out of range, no digits, unknown or decimal units, signs, overflow.
  for (const char* bad : {"", "0", "2K", "4095", "3M", "6291456", "128M", "65M", "K", "M",
                          "4G", "4KB", "4 K", "1.5M", "-4M", "+4M", "0x1000",
                          "99999999999K", "4294967296", "4M4"}) {
    INFO(bad);
    bytes = 42;
    CHECK_FALSE(parse_ring_max(bad, bytes, err));
    CHECK(bytes == 42);
    CHECK(err.message.find("invalid ring size") != std::string::npos);
  }
}

TEST_CASE("verbs zero-copy threshold", "[config][zero-copy]") {
  ParseError err;
  uint32_t bytes = 7;
  const std::pair<const char*, uint32_t> good[] = {
      {"16K", 16384}, {"16384", 16384}, {"24K", 24576}, {" 64KiB ", 65536},
      {"100000", 100000}, {"1m", 1u << 20}, {"64M", 64u << 20}};
  for (const auto& [text, want] : good) {
    INFO(text);
    CHECK(parse_zero_copy_min(text, bytes, err));
    CHECK(bytes == want);
  }
  // Below one message, above the bound, no digits, unknown units, signs.
  for (const char* bad : {"", "0", "16383", "15K", "65M", "1G", "K", "64KB", "-64K", "1.5M"}) {
    INFO(bad);
    bytes = 42;
    CHECK_FALSE(parse_zero_copy_min(bad, bytes, err));
    CHECK(bytes == 42);
    CHECK(err.message.find("invalid size") != std::string::npos);
  }
}

TEST_CASE("booleans", "[config][bool]") {
  ParseError err;
  for (const char* yes : {"1", "yes", "true", "on", "YES", "True", "ON"}) {
    INFO(yes);
    bool b = false;
    CHECK(parse_bool(yes, b, err));
    CHECK(b);
  }
  for (const char* no : {"0", "no", "false", "off", "No", "FALSE"}) {
    INFO(no);
    bool b = true;
    CHECK(parse_bool(no, b, err));
    CHECK_FALSE(b);
  }
  for (const char* bad : {"", "2", "y", "enable", "nope"}) {
    INFO(bad);
    bool b = true;
    CHECK_FALSE(parse_bool(bad, b, err));
    CHECK(b);
    CHECK(err.message.find("invalid boolean") != std::string::npos);
  }
}

TEST_CASE("address patterns: valid forms", "[config][address]") {
  const AddressPattern any = pattern("*");
  CHECK(any.family == 0);
  CHECK(any.port_lo == 0);
  CHECK(any.port_hi == 65535);

  const AddressPattern any_port = pattern("*:6379");
  CHECK(any_port.family == 0);
  CHECK(any_port.port_lo == 6379);
  CHECK(any_port.port_hi == 6379);

  const AddressPattern host = pattern("127.0.0.1");
  CHECK(host.family == AF_INET);
  CHECK(host.prefix_len == 32);
  CHECK((host.addr[0] == 127 && host.addr[1] == 0 && host.addr[2] == 0 && host.addr[3] == 1));
  CHECK((host.port_lo == 0 && host.port_hi == 65535));

  const AddressPattern net = pattern("10.0.0.0/8:1000-2000");
  CHECK(net.family == AF_INET);
  CHECK(net.prefix_len == 8);
  CHECK(net.addr[0] == 10);
  CHECK((net.port_lo == 1000 && net.port_hi == 2000));

  // Host bits beyond the prefix are cleared, so the pattern reads as its network.
  const AddressPattern masked = pattern("192.168.77.200/20");
  CHECK((masked.addr[0] == 192 && masked.addr[1] == 168 && masked.addr[2] == 64 &&
         masked.addr[3] == 0));

  const AddressPattern loop6 = pattern("[::1]:80");
  CHECK(loop6.family == AF_INET6);
  CHECK(loop6.prefix_len == 128);
  CHECK(loop6.addr[15] == 1);
  CHECK((loop6.port_lo == 80 && loop6.port_hi == 80));

  const AddressPattern link = pattern("[fe80::/10]:*");
  CHECK(link.family == AF_INET6);
  CHECK(link.prefix_len == 10);
  CHECK((link.addr[0] == 0xfe && link.addr[1] == 0x80));
  CHECK((link.port_lo == 0 && link.port_hi == 65535));

  CHECK(pattern("[2001:db8::]").port_hi == 65535);
  CHECK(pattern("0.0.0.0/0").prefix_len == 0);
  CHECK(pattern("[::/0]").prefix_len == 0);
  CHECK(pattern("*:0-65535").port_hi == 65535);
  CHECK(pattern("*:0").port_hi == 0);
  CHECK(pattern("1.2.3.4:5-5").port_lo == 5);
}

TEST_CASE("address patterns: malformed input", "[config][address]") {
  CHECK(pattern_error("") == "empty address pattern");
  CHECK(pattern_error("localhost").find("invalid IPv4 address 'localhost'") !=
        std::string::npos);
  CHECK(pattern_error("1.2.3").find("invalid IPv4 address") != std::string::npos);
  CHECK(pattern_error("1.2.3.256").find("invalid IPv4 address") != std::string::npos);
  CHECK(pattern_error("1.2.3.4/33").find("invalid prefix length '33'") != std::string::npos);
  CHECK(pattern_error("1.2.3.4/").find("invalid prefix length") != std::string::npos);
  CHECK(pattern_error("1.2.3.4/-1").find("invalid prefix length") != std::string::npos);
  CHECK(pattern_error("[::1/129]").find("invalid prefix length '129'") != std::string::npos);
  CHECK(pattern_error("1.2.3.4:").find("invalid port") != std::string::npos);
  CHECK(pattern_error("1.2.3.4:65536").find("invalid port") != std::string::npos);
  CHECK(pattern_error("1.2.3.4:http").find("invalid port") != std::string::npos);
  CHECK(pattern_error("1.2.3.4:1-").find("invalid port") != std::string::npos);
  CHECK(pattern_error("1.2.3.4:-1").find("invalid port") != std::string::npos);
  CHECK(pattern_error("*:2000-1000").find("empty port range") != std::string::npos);
  CHECK(pattern_error("*:").find("invalid port") != std::string::npos);
  CHECK(pattern_error("**").find("invalid IPv4 address") != std::string::npos);
  CHECK(pattern_error("::1").find("in brackets") != std::string::npos);
  CHECK(pattern_error("[::1").find("missing ']'") != std::string::npos);
  CHECK(pattern_error("[::1]80").find("after ']'") != std::string::npos);
  CHECK(pattern_error("[]").find("invalid IPv6 address") != std::string::npos);
  CHECK(pattern_error("[1.2.3.4]").find("invalid IPv6 address") != std::string::npos);
  CHECK(pattern_error("[::1]:").find("invalid port") != std::string::npos);
  CHECK(pattern_error(std::string(300, '1')).size() < 200);
}

TEST_CASE("rules file: valid input", "[config][rules]") {
  const auto rules = rules_of(
      "# fastsock rules: first match wins\n"
      "\n"
      "use shm client redis-* 127.0.0.1:6379\r\n"
      "  use verbs,vendor\tserver  postgres [fe80::/10]:5432   # trailing comment\n"
      "use tcp any * *\n"
      "   \t  \n"
      "USE shm,verbs any java* 10.0.0.0/8:1000-2000");
  REQUIRE(rules.size() == 4);

  CHECK(rules[0].line == 3);
  CHECK(rules[0].allowed == (bit(shm) | bit(tcp)));  // tcp is always implicitly allowed
  CHECK(rules[0].direction == Direction::client);
  CHECK(rules[0].program_glob == "redis-*");
  CHECK(rules[0].address.family == AF_INET);
  CHECK(rules[0].address.port_lo == 6379);

  CHECK(rules[1].line == 4);
  CHECK(rules[1].allowed == (bit(verbs) | bit(vendor) | bit(tcp)));
  CHECK(rules[1].direction == Direction::server);
  CHECK(rules[1].program_glob == "postgres");
  CHECK(rules[1].address.family == AF_INET6);
  CHECK(rules[1].address.prefix_len == 10);

  CHECK(rules[2].line == 5);
  CHECK(rules[2].allowed == bit(tcp));
  CHECK(rules[2].direction == Direction::any);
  CHECK(rules[2].address.family == 0);

  CHECK(rules[3].line == 7);
  CHECK(rules[3].allowed == (bit(shm) | bit(verbs) | bit(tcp)));

  CHECK(rules_of("").empty());
  CHECK(rules_of("# only a comment\n\n\r\n").empty());
  // In a rule the transport list may name tcp anywhere: it is a set, not a chain.
  CHECK(rules_of("use tcp,shm any * *")[0].allowed == (bit(shm) | bit(tcp)));
}

TEST_CASE("rules file: malformed input names the line", "[config][rules]") {
  ParseError e = rules_error("use shm any * *\n\nallow shm any * *\n");
  CHECK(e.line == 3);
  CHECK(e.message.find("unknown keyword 'allow'") != std::string::npos);

  e = rules_error("use shm any *");
  CHECK(e.line == 1);
  CHECK(e.message.find("incomplete rule with 4 fields") != std::string::npos);

  e = rules_error("use");
  CHECK(e.message.find("incomplete rule with 1 fields") != std::string::npos);

  e = rules_error("use shm any * * extra");
  CHECK(e.message.find("unexpected extra field 'extra'") != std::string::npos);

  e = rules_error("# c\nuse foo any * *");
  CHECK(e.line == 2);
  CHECK(e.message == "unknown transport 'foo' (valid: shm, verbs, vendor, tcp)");

  CHECK(rules_error("use shm,,tcp any * *").message.find("empty item") != std::string::npos);
  CHECK(rules_error("use shm, any * *").message.find("empty item") != std::string::npos);
  CHECK(rules_error("use shm,shm any * *").message.find("more than once") != std::string::npos);
  CHECK(rules_error("use shm both * *").message.find("unknown direction 'both'") !=
        std::string::npos);
  CHECK(rules_error("use shm any * 10.0.0.0/40").message.find("invalid prefix length") !=
        std::string::npos);
  CHECK(rules_error("use shm any " + std::string(256, 'p') + " *")
            .message.find("longer than 255 bytes") != std::string::npos);
  CHECK(rules_error(std::string("use shm any a\0b *", 17)).message.find("control character") !=
        std::string::npos);
  CHECK(rules_error("use shm any a\vb *").message.find("control character '\\x0b'") !=
        std::string::npos);
}

TEST_CASE("rules file: size and count limits", "[config][rules]") {
  std::string many;
  for (int i = 0; i < 10000; ++i) many += "use shm any * *\n";
  CHECK(rules_of(many).size() == 10000);
  many += "use shm any * *\n";
  const ParseError e = rules_error(many);
  CHECK(e.line == 10001);
  CHECK(e.message.find("too many rules") != std::string::npos);

  // Comments do not count as rules, but they do count towards the size limit.
  const std::string big(1024 * 1024 + 1, '#');
  const ParseError too_big = rules_error(big);
  CHECK(too_big.line == 0);
  CHECK(too_big.message.find("larger than 1 MiB") != std::string::npos);
  CHECK(rules_of(std::string(1024 * 1024, '#')).empty());
}

TEST_CASE("config_from: defaults when nothing is set", "[config][env]") {
  const Config c = config_with({});
  CHECK(c.chain == Chain{shm, verbs, vendor, tcp});
  CHECK(c.log_level == LogLevel::warn);
  CHECK(c.log_file.empty());
  CHECK(c.spin_us == 50);
  CHECK(c.spin_adapt);
  CHECK(c.shm_ring_max == 1u << 20);
  CHECK(c.stats_enabled);
  CHECK_FALSE(c.zerocopy);
  CHECK(c.verbs_zero_copy);
  CHECK(c.verbs_zero_copy_min == kDefaultVerbsZeroCopyMin);
  CHECK(c.fd_budget);
  CHECK(c.rules_path.empty());
  CHECK(c.rules.empty());
  CHECK_FALSE(c.pass_through_forced);
  CHECK(c.error.empty());
}

TEST_CASE("config_from: every variable set", "[config][env]") {
  const Config c = config_with({{"FASTSOCK_TRANSPORTS", "verbs, shm"},
                                {"FASTSOCK_LOG", "debug"},
                                {"FASTSOCK_LOG_FILE", "/tmp/fastsock.log"},
                                {"FASTSOCK_SPIN_US", "0"},
                                {"FASTSOCK_SPIN_ADAPT", "no"},
                                {"FASTSOCK_SHM_RING_MAX", "256K"},
                                {"FASTSOCK_STATS", "off"},
                                {"FASTSOCK_ZEROCOPY", "on"},
                                {"FASTSOCK_VERBS_ZERO_COPY", "off"},
                                {"FASTSOCK_VERBS_ZERO_COPY_MIN", "32K"},
                                {"FASTSOCK_FD_BUDGET", "off"},
                                {"FASTSOCK_RULES", "/etc/fastsock.rules"}},
                               "use shm client * *\nuse verbs server * *\n");
  CHECK(c.chain == Chain{verbs, shm, tcp});
  CHECK(c.log_level == LogLevel::debug);
  CHECK(c.log_file == "/tmp/fastsock.log");
  CHECK(c.spin_us == 0);
  CHECK_FALSE(c.spin_adapt);
  CHECK(c.shm_ring_max == 256u << 10);
  CHECK_FALSE(c.stats_enabled);
  CHECK(c.zerocopy);
  CHECK_FALSE(c.verbs_zero_copy);
  CHECK(c.verbs_zero_copy_min == 32u << 10);
  CHECK_FALSE(c.fd_budget);
  CHECK(c.rules_path == "/etc/fastsock.rules");
  REQUIRE(c.rules.size() == 2);
  CHECK(c.rules[1].direction == Direction::server);
  CHECK_FALSE(c.pass_through_forced);
  CHECK(c.error.empty());
}

TEST_CASE("config_from: a malformed setting forces pass-through", "[config][env]") {
  Config c = config_with({{"FASTSOCK_TRANSPORTS", "foo"},
                          {"FASTSOCK_LOG", "off"},
                          {"FASTSOCK_LOG_FILE", "/tmp/x.log"},
                          {"FASTSOCK_SPIN_US", "7"},
                          {"FASTSOCK_STATS", "0"},
                          {"FASTSOCK_RULES", "/etc/r"}},
                         "use shm any * *\n");
  CHECK(c.pass_through_forced);
  CHECK(c.chain == Chain{tcp});
  CHECK(c.error == "FASTSOCK_TRANSPORTS: unknown transport 'foo' (valid: shm, verbs, vendor, tcp)");
  // Every other setting is back at its default, so the message is printed on stderr at
  // level error even when the user asked for FASTSOCK_LOG=off or a log file.
  CHECK(c.log_level == LogLevel::warn);
  CHECK(c.log_file.empty());
  CHECK(c.spin_us == 50);
  CHECK(c.stats_enabled);
  CHECK(c.rules_path.empty());
  CHECK(c.rules.empty());

  c = config_with({{"FASTSOCK_LOG", "loud"}});
  CHECK(c.pass_through_forced);
  CHECK(c.chain == Chain{tcp});
  CHECK(c.error.rfind("FASTSOCK_LOG: unknown log level 'loud'", 0) == 0);

  c = config_with({{"FASTSOCK_LOG_FILE", ""}});
  CHECK(c.pass_through_forced);
  CHECK(c.error == "FASTSOCK_LOG_FILE: the path is empty");

  c = config_with({{"FASTSOCK_SPIN_US", "-3"}});
  CHECK(c.pass_through_forced);
  CHECK(c.error.rfind("FASTSOCK_SPIN_US: invalid spin time '-3'", 0) == 0);

  c = config_with({{"FASTSOCK_SHM_RING_MAX", "3M"}});
  CHECK(c.pass_through_forced);
  CHECK(c.shm_ring_max == kDefaultShmRingMax);
  CHECK(c.error.rfind("FASTSOCK_SHM_RING_MAX: invalid ring size '3M'", 0) == 0);

  c = config_with({{"FASTSOCK_STATS", "maybe"}});
  CHECK(c.pass_through_forced);
  CHECK(c.error.rfind("FASTSOCK_STATS: invalid boolean 'maybe'", 0) == 0);

  c = config_with({{"FASTSOCK_ZEROCOPY", "2"}});
  CHECK(c.pass_through_forced);
  CHECK_FALSE(c.zerocopy);
  CHECK(c.error.rfind("FASTSOCK_ZEROCOPY: invalid boolean '2'", 0) == 0);

  c = config_with({{"FASTSOCK_VERBS_ZERO_COPY_MIN", "4K"}});
  CHECK(c.pass_through_forced);
  CHECK(c.verbs_zero_copy_min == kDefaultVerbsZeroCopyMin);
  CHECK(c.error.rfind("FASTSOCK_VERBS_ZERO_COPY_MIN: invalid size '4K'", 0) == 0);

  c = config_with({{"FASTSOCK_TRANSPORTS", ""}});
  CHECK(c.pass_through_forced);
  CHECK(c.error == "FASTSOCK_TRANSPORTS: the transport list is empty");

  c = config_with({{"FASTSOCK_RULES", ""}});
  CHECK(c.pass_through_forced);
  CHECK(c.error == "FASTSOCK_RULES: the path is empty");
}

TEST_CASE("config_from: rules file errors", "[config][env][rules]") {
  Config c = config_with({{"FASTSOCK_RULES", "/etc/r"}},
                         "use shm any * *\n# x\nuse shm sideways * *\n");
  CHECK(c.pass_through_forced);
  CHECK(c.chain == Chain{tcp});
  CHECK(c.rules.empty());
  CHECK(c.error == "rules file line 3: unknown direction 'sideways' (valid: client, server, any)");

  c = config_with({{"FASTSOCK_RULES", "/etc/r"}}, std::string(2 << 20, '\n'));
  CHECK(c.pass_through_forced);
  CHECK(c.error.rfind("FASTSOCK_RULES: the rules file is larger than 1 MiB", 0) == 0);

  // Without FASTSOCK_RULES the text is not consulted.
  c = config_with({}, "garbage");
  CHECK_FALSE(c.pass_through_forced);
  CHECK(c.rules.empty());
}

TEST_CASE("config_from: only the first error is reported", "[config][env]") {
  const Config c = config_with({{"FASTSOCK_TRANSPORTS", "tcp,shm"}, {"FASTSOCK_LOG", "x"}});
  CHECK(c.pass_through_forced);
  CHECK(c.error.rfind("FASTSOCK_TRANSPORTS: 'tcp' must be last", 0) == 0);
  CHECK(c.error.find("FASTSOCK_LOG") == std::string::npos);
}

TEST_CASE("match: IPv4 prefixes", "[config][match]") {
  const Addr peer = v4("10.1.2.3", 5000);
  CHECK(address_matches("*", peer));
  CHECK(address_matches("0.0.0.0/0", peer));
  CHECK(address_matches("10.0.0.0/8", peer));
  CHECK(address_matches("10.1.2.3", peer));
  CHECK(address_matches("10.1.2.3/32", peer));
  CHECK(address_matches("10.1.2.0/23", peer));
  CHECK_FALSE(address_matches("11.0.0.0/8", peer));
  CHECK_FALSE(address_matches("10.1.2.4/32", peer));
  CHECK_FALSE(address_matches("10.1.2.4", peer));
  CHECK(address_matches("10.1.2.2/31", peer));
  CHECK_FALSE(address_matches("10.1.2.4/31", peer));
  // An IPv4 peer never matches an IPv6 pattern, not even ::/0.
  CHECK_FALSE(address_matches("[::/0]", peer));
}

TEST_CASE("match: IPv6 prefixes", "[config][match]") {
  const Addr peer = v6("fe80::1:2", 80);
  CHECK(address_matches("*", peer));
  CHECK(address_matches("[::/0]", peer));
  CHECK(address_matches("[fe80::/10]", peer));
  CHECK(address_matches("[fe80::1:2/128]", peer));
  CHECK(address_matches("[fe80::1:2]", peer));
  CHECK_FALSE(address_matches("[fe80::1:3]", peer));
  CHECK_FALSE(address_matches("[fec0::/10]", peer));
  CHECK(address_matches("[fe80::1:0/112]", peer));
  CHECK_FALSE(address_matches("0.0.0.0/0", peer));  // a native IPv6 peer is not IPv4
  CHECK(address_matches("[::1]", v6("::1", 1)));
  CHECK_FALSE(address_matches("[::1]", v4("127.0.0.1", 1)));
}

TEST_CASE("match: IPv4-mapped IPv6 peers match IPv4 patterns", "[config][match]") {
  const Addr mapped = v6("::ffff:192.168.1.20", 6379);
  CHECK(address_matches("192.168.1.20", mapped));
  CHECK(address_matches("192.168.0.0/16:6379", mapped));
  CHECK(address_matches("0.0.0.0/0", mapped));
  CHECK_FALSE(address_matches("192.168.1.21", mapped));
  CHECK_FALSE(address_matches("192.168.1.20:6380", mapped));
  // It is still an IPv6 address for IPv6 patterns.
  CHECK(address_matches("[::ffff:0:0/96]", mapped));
  CHECK_FALSE(address_matches("[fe80::/10]", mapped));
  // ::ffff:... is mapped; ::c0a8:114 (IPv4-compatible, deprecated) is not.
  CHECK_FALSE(address_matches("192.168.1.20", v6("::192.168.1.20", 6379)));
}

TEST_CASE("match: ports", "[config][match]") {
  CHECK(address_matches("*:6379", v4("1.2.3.4", 6379)));
  CHECK_FALSE(address_matches("*:6379", v4("1.2.3.4", 6380)));
  CHECK(address_matches("*:1000-2000", v4("1.2.3.4", 1000)));
  CHECK(address_matches("*:1000-2000", v4("1.2.3.4", 2000)));
  CHECK_FALSE(address_matches("*:1000-2000", v4("1.2.3.4", 999)));
  CHECK_FALSE(address_matches("*:1000-2000", v4("1.2.3.4", 2001)));
  CHECK(address_matches("*:*", v6("::1", 0)));
  CHECK(address_matches("*:65535", v6("::1", 65535)));
  CHECK(address_matches("[::1]:80", v6("::1", 80)));
  CHECK_FALSE(address_matches("[::1]:80", v6("::1", 81)));
  CHECK(address_matches("127.0.0.0/8:1-1024", v4("127.0.0.53", 53)));
}

TEST_CASE("match: program globs", "[config][match]") {
  const Addr peer = v4("127.0.0.1", 1);
  CHECK(one_rule_matches("use shm any redis-* *", "redis-server", Direction::client, peer));
  CHECK_FALSE(one_rule_matches("use shm any redis-* *", "redis", Direction::client, peer));
  CHECK(one_rule_matches("use shm any * *", "", Direction::client, peer));
  CHECK(one_rule_matches("use shm any java *", "java", Direction::client, peer));
  CHECK_FALSE(one_rule_matches("use shm any java *", "javac", Direction::client, peer));
  CHECK(one_rule_matches("use shm any ?ginx *", "nginx", Direction::client, peer));
  CHECK(one_rule_matches("use shm any [mp]ysql* *", "mysqld", Direction::client, peer));
  CHECK_FALSE(one_rule_matches("use shm any [!m]ysql* *", "mysqld", Direction::client, peer));
  // Names longer than the on-stack buffer take the allocating path.
  CHECK(one_rule_matches("use shm any a*z *", "a" + std::string(400, 'q') + "z",
                         Direction::client, peer));
}

TEST_CASE("match: direction", "[config][match]") {
  const Addr peer = v4("127.0.0.1", 1);
  CHECK(one_rule_matches("use shm client * *", "p", Direction::client, peer));
  CHECK_FALSE(one_rule_matches("use shm client * *", "p", Direction::server, peer));
  CHECK(one_rule_matches("use shm server * *", "p", Direction::server, peer));
  CHECK_FALSE(one_rule_matches("use shm server * *", "p", Direction::client, peer));
  CHECK(one_rule_matches("use shm any * *", "p", Direction::client, peer));
  CHECK(one_rule_matches("use shm any * *", "p", Direction::server, peer));
}

TEST_CASE("match: first match wins", "[config][match]") {
  const auto rules = rules_of(
      "use tcp client curl *\n"
      "use shm any * 127.0.0.0/8\n"
      "use verbs any * *\n");
  REQUIRE(rules.size() == 3);
  CHECK(match_rule(rules, "curl", Direction::client, v4("127.0.0.1", 80).sa()) == &rules[0]);
  CHECK(match_rule(rules, "curl", Direction::server, v4("127.0.0.1", 80).sa()) == &rules[1]);
  CHECK(match_rule(rules, "wget", Direction::client, v4("127.0.0.1", 80).sa()) == &rules[1]);
  CHECK(match_rule(rules, "wget", Direction::client, v4("10.0.0.1", 80).sa()) == &rules[2]);
  CHECK(match_rule(rules, "wget", Direction::client, v6("::1", 80).sa()) == &rules[2]);

  const auto narrow = rules_of("use shm client redis* 127.0.0.1:6379\n");
  CHECK(match_rule(narrow, "redis-cli", Direction::client, v4("127.0.0.1", 6380).sa()) ==
        nullptr);
  CHECK(match_rule({}, "anything", Direction::client, v4("127.0.0.1", 1).sa()) == nullptr);
}

TEST_CASE("match: unknown or missing peer address only matches '*'", "[config][match]") {
  const auto rules = rules_of("use shm any * *:80\nuse verbs any * 0.0.0.0/0\nuse vendor any * *\n");
  CHECK(match_rule(rules, "p", Direction::client, nullptr) == &rules[2]);
  sockaddr_storage unix_peer{};
  unix_peer.ss_family = AF_UNIX;
  CHECK(match_rule(rules, "p", Direction::client, reinterpret_cast<const sockaddr*>(&unix_peer)) ==
        &rules[2]);
}

TEST_CASE("rules file: vendor library profiles", "[config][rules][vendor]") {
  const std::string text =
      "# a test library, then a replacement for the built-in rsocket profile\n"
      "vendor tv library=/opt/tv/libtv.so names=prefix:tv readiness=fd optional=poll\n"
      "use vendor,tcp any * 10.0.0.0/8\n"
      "  VENDOR rsocket library=/opt/rdma/librdmacm.so.1 names=prefix:r  # comment\n";
  const Config c = config_with({{"FASTSOCK_RULES", "/etc/r"}}, text);
  REQUIRE_FALSE(c.pass_through_forced);
  REQUIRE(c.rules.size() == 1);
  CHECK(c.rules[0].line == 3);
  REQUIRE(c.vendor_profiles.size() == 2);
  CHECK(c.vendor_profiles[0].name == "tv");
  CHECK(c.vendor_profiles[0].line == 2);
  CHECK(c.vendor_profiles[0].libraries == std::vector<std::string>{"/opt/tv/libtv.so"});
  CHECK(c.vendor_profiles[1].name == "rsocket");
  CHECK(c.vendor_profiles[1].line == 4);
  CHECK(c.vendor_profiles[1].libraries == std::vector<std::string>{"/opt/rdma/librdmacm.so.1"});

  // parse_rules alone validates vendor lines, and keeps them only when asked.
  std::vector<Rule> rules;
  ParseError err;
  REQUIRE(parse_rules(text, rules, err));
  CHECK(rules.size() == 1);
  std::vector<vendors::Profile> profiles;
  REQUIRE(parse_rules(text, rules, err, &profiles));
  CHECK(profiles.size() == 2);
}

TEST_CASE("rules file: malformed vendor profiles force pass-through", "[config][rules][vendor]") {
  Config c = config_with({{"FASTSOCK_RULES", "/etc/r"}},
                         "use shm any * *\nvendor tv library=libtv.so names=prefix:tv colour=red\n");
  CHECK(c.pass_through_forced);
  CHECK(c.chain == Chain{tcp});
  CHECK(c.vendor_profiles.empty());
  CHECK(c.error ==
        "rules file line 2: unknown key 'colour' (valid: library, names, optional, family, "
        "sockaddr-family, ipv6, readiness, port-offset, needs)");

  c = config_with({{"FASTSOCK_RULES", "/etc/r"}}, "vendor\n");
  CHECK(c.error == "rules file line 1: a vendor profile needs a name and library=, names=");

  c = config_with({{"FASTSOCK_RULES", "/etc/r"}},
                  "vendor a library=x names=plain\n\nvendor a library=y names=plain\n");
  CHECK(c.error == "rules file line 3: vendor profile 'a' is defined twice (first on line 1)");

  std::string many;
  for (int i = 0; i <= 16; ++i) many += "vendor p" + std::to_string(i) + " library=l names=plain\n";
  c = config_with({{"FASTSOCK_RULES", "/etc/r"}}, many);
  CHECK(c.error == "rules file line 17: too many vendor profiles (the limit is 16)");

  const ParseError e = rules_error("allow shm any * *\n");
  CHECK(e.message ==
        "unknown keyword 'allow' (a line is a rule, 'use ...', or a vendor library profile, "
        "'vendor <name> ...')");
}
