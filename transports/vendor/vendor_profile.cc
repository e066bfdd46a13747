#include "vendor_profile.hpp"

#include <netinet/in.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "quote.hpp"

namespace fastsock::vendors {
namespace {

constexpr std::string_view kEntryNames[kEntryCount] = {
    "socket", "bind",  "listen",   "accept",   "connect",    "send",       "recv", "sendmsg",
    "recvmsg", "poll", "close", "shutdown", "setsockopt", "getsockopt", "fcntl"};

constexpr std::string_view kValidKeys =
    "library, names, optional, family, sockaddr-family, ipv6, readiness, port-offset, needs";

// Linux's socket families are small numbers (AF_MAX is 46 in 2024); 1023 leaves room for a
// vendor's private number without letting a typo pass as one.
constexpr uint32_t kMaxFamily = 1023;

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' ||
         c == '_';
}

bool fail(std::string& error, std::string message) {
  error = std::move(message);
  return false;
}

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

bool entry_from_name(std::string_view name, Entry& out) {
  for (int i = 0; i < kEntryCount; ++i)
    if (kEntryNames[i] == name) return out = Entry(i), true;
  return false;
}

std::string entry_list(EntryMask mask) {
  std::string s;
  for (int i = 0; i < kEntryCount; ++i) {
    if (!(mask & entry_bit(Entry(i)))) continue;
    if (!s.empty()) s += ", ";
    s += kEntryNames[i];
  }
  return s;
}

// Calls `item` for each comma-separated item of `text`; an empty item is an error.
template <typename F>
bool for_each_item(std::string_view text, std::string_view key, std::string& error, F item) {
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view one = text.substr(start, comma == std::string_view::npos
                                                        ? std::string_view::npos
                                                        : comma - start);
    if (one.empty())
      return fail(error, "empty item in " + std::string(key) + "=" + quote(text));
    if (!item(one)) return false;
    if (comma == std::string_view::npos) return true;
    start = comma + 1;
  }
}

bool parse_libraries(std::string_view v, Profile& p, std::string& error) {
  p.libraries.clear();
  return for_each_item(v, "library", error, [&](std::string_view lib) {
    if (p.libraries.size() == kMaxLibraries)
      return fail(error, "more than " + std::to_string(kMaxLibraries) + " libraries in library=");
    if (lib.size() > kMaxLibraryBytes)
      return fail(error, "library name " + quote(lib) + " is longer than " +
                             std::to_string(kMaxLibraryBytes) + " bytes");
    p.libraries.emplace_back(lib);
    return true;
  });
}

bool parse_names(std::string_view v, Profile& p, std::string& error) {
  if (v == "plain") {
    p.naming = Naming::plain;
    p.prefix.clear();
    return true;
  }
  if (v.substr(0, 7) == "prefix:") {
    p.naming = Naming::prefix;
    p.prefix.assign(v.substr(7));
    return true;  // the prefix itself is checked by validate_profile
  }
  return fail(error, "invalid names=" + quote(v) + " (expected plain or prefix:<prefix>)");
}

bool parse_optional(std::string_view v, Profile& p, std::string& error) {
  p.optional = 0;
  return for_each_item(v, "optional", error, [&](std::string_view name) {
    Entry e;
    if (!entry_from_name(name, e))
      return fail(error, "unknown entry point " + quote(name) + " in optional= (valid: " +
                             entry_list(kAllEntries) + ")");
    p.optional = EntryMask(p.optional | entry_bit(e));
    return true;
  });
}

bool parse_yes_no(std::string_view key, std::string_view v, bool& out, std::string& error) {
  if (v == "yes") return out = true, true;
  if (v == "no") return out = false, true;
  return fail(error, "invalid " + std::string(key) + "=" + quote(v) + " (expected yes or no)");
}

// One key=value field.
bool parse_field(std::string_view field, Profile& p, uint16_t& seen, std::string& error) {
  const size_t eq = field.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return fail(error, "expected <key>=<value>, got " + quote(field));
  const std::string_view key = field.substr(0, eq), v = field.substr(eq + 1);
  static constexpr std::string_view kKeys[] = {"library", "names", "optional",
                                               "family",  "sockaddr-family", "ipv6",
                                               "readiness", "port-offset", "needs"};
  int index = -1;
  for (int i = 0; i < int(std::size(kKeys)); ++i)
    if (kKeys[i] == key) index = i;
  if (index < 0)
    return fail(error, "unknown key " + quote(key) + " (valid: " + std::string(kValidKeys) + ")");
  if (seen & (1u << index)) return fail(error, "key '" + std::string(key) + "' is given twice");
  seen = uint16_t(seen | (1u << index));
  if (v.empty()) return fail(error, "empty value for " + std::string(key) + "=");

  switch (index) {
    case 0: return parse_libraries(v, p, error);
    case 1: return parse_names(v, p, error);
    case 2: return parse_optional(v, p, error);
    case 3: {
      uint32_t family = 0;
      if (v == "same") return p.address.socket_family = 0, true;
      if (!parse_uint(v, kMaxFamily, family) || family == 0)
        return fail(error, "invalid family=" + quote(v) + " (expected same or a number from 1 to " +
                               std::to_string(kMaxFamily) + ")");
      p.address.socket_family = int(family);
      return true;
    }
    case 4:
      if (v == "tcp") return p.address.rewrite_sockaddr_family = false, true;
      if (v == "vendor") return p.address.rewrite_sockaddr_family = true, true;
      return fail(error, "invalid sockaddr-family=" + quote(v) + " (expected tcp or vendor)");
    case 5: return parse_yes_no(key, v, p.address.ipv6, error);
    case 6:
      if (v == "poll") return p.readiness = Readiness::vendor_poll, true;
      if (v == "fd") return p.readiness = Readiness::kernel_fd, true;
      return fail(error, "invalid readiness=" + quote(v) + " (expected poll or fd)");
    case 7: {
      uint32_t offset = 0;
      if (!parse_uint(v, 65535, offset))
        return fail(error, "invalid port-offset=" + quote(v) + " (expected 0 to 65535)");
      p.address.port_offset = uint16_t(offset);
      return true;
    }
    case 8:
      if (v.size() > kMaxLibraryBytes || v[0] != '/')
        return fail(error, "invalid needs=" + quote(v) + " (expected an absolute path of at most " +
                               std::to_string(kMaxLibraryBytes) + " bytes)");
      p.needs.assign(v);
      return true;
  }
  return false;
}

bool valid_name(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

Profile make_builtin(std::string name, std::vector<std::string> libraries, Naming naming,
                     std::string prefix, EntryMask optional, AddressRule address,
                     Readiness readiness, std::string needs = "") {
  Profile p;
  p.name = std::move(name);
  p.libraries = std::move(libraries);
  p.naming = naming;
  p.prefix = std::move(prefix);
  p.optional = optional;
  p.address = address;
  p.readiness = readiness;
  p.needs = std::move(needs);
  p.builtin = true;
  return p;
}

}  // namespace

std::string_view entry_name(Entry e) {
  const auto i = unsigned(e);
  return i < unsigned(kEntryCount) ? kEntryNames[i] : "?";
}

std::string symbol_name(const Profile& p, Entry e) {
  std::string s = p.naming == Naming::prefix ? p.prefix : std::string();
  s += entry_name(e);
  return s;
}

EntryMask required_entries(const Profile& p) {
  EntryMask m = kRequiredEntries;
  if (p.readiness == Readiness::vendor_poll) m = EntryMask(m | entry_bit(Entry::poll));
  return m;
}

const std::vector<Profile>& builtin_profiles() {
  // Sources for every field: docs/vendor.md, "Built-in profiles".
  static const std::vector<Profile> profiles = [] {
    std::vector<Profile> v;
    // rdma-core's <rdma/rsocket.h> declares every entry below with an 'r' prefix, and
    // rsocket(7) lists PF_INET and PF_INET6; its descriptors work only with its own calls.
    // librdmacm is installed on many hosts without an RDMA device, where rsocket() fails
    // (ENODEV): the device directory the verbs link reads tells it without loading it.
    v.push_back(make_builtin("rsocket", {"librdmacm.so.1"}, Naming::prefix, "r", 0,
                             AddressRule{}, Readiness::vendor_poll, "/sys/class/infiniband"));
    v.back().rdma_cm_ports = true;  // rsocket.c: a stream rsocket's CM id is in RDMA_PS_TCP
    // Myricom's README for the Sockets-MX module: a kernel protocol family, AF_MYRI (27),
    // to which its preload library remaps AF_INET at socket(); the sockets are the kernel's.
    // So libc's own socket calls reach it, with domain 27. Assumed (not documented in what
    // we found): addresses stay sockaddr_in as the application gave them, IPv4 only, and
    // AF_MYRI has a port space of its own.
    AddressRule mx;
    mx.socket_family = 27;
    mx.ipv6 = false;
    v.push_back(make_builtin("sockets-mx", {"libc.so.6"}, Naming::plain, "", 0, mx,
                             Readiness::kernel_fd));
    // Dolphin's SuperSockets (successor of SCI Sockets): a preloaded user-space library,
    // libksupersockets.so, that intercepts the socket calls (plain names) including
    // poll()/select() (its SYSTEM_POLL option). Assumed: AF_INET addresses as they are,
    // IPv4 only, and descriptors usable only through its own poll.
    AddressRule dolphin;
    dolphin.ipv6 = false;
    v.push_back(make_builtin("supersockets", {"libksupersockets.so"}, Naming::plain, "", 0,
                             dolphin, Readiness::vendor_poll));
    return v;
  }();
  return profiles;
}

bool validate_profile(const Profile& p, std::string& error) {
  if (!valid_name(p.name, kMaxNameBytes))
    return fail(error, "invalid profile name " + quote(p.name) + " (1 to " +
                           std::to_string(kMaxNameBytes) + " letters, digits, '-' or '_')");
  if (p.libraries.empty())
    return fail(error, "profile '" + p.name + "' names no library (library=<name>[,<name>...])");
  if (p.naming == Naming::prefix && !valid_name(p.prefix, kMaxPrefixBytes))
    return fail(error, "invalid prefix " + quote(p.prefix) + " in profile '" + p.name + "' (1 to " +
                           std::to_string(kMaxPrefixBytes) + " letters, digits, '-' or '_')");
  if (const EntryMask bad = EntryMask(p.optional & required_entries(p)))
    return fail(error, "profile '" + p.name + "' declares required entry points optional: " +
                           entry_list(bad) +
                           (bad & entry_bit(Entry::poll) ? " (readiness=poll needs poll)" : ""));
  if (p.address.rewrite_sockaddr_family && p.address.socket_family == 0)
    return fail(error, "profile '" + p.name +
                           "' has sockaddr-family=vendor without a vendor family (family=<number>)");
  return true;
}

bool parse_profile(std::string_view text, Profile& out, std::string& error) {
  Profile p;
  uint16_t seen = 0;
  size_t i = 0;
  bool have_name = false;
  while (true) {
    while (i < text.size() && is_blank(text[i])) ++i;
    if (i == text.size()) break;
    const size_t start = i;
    while (i < text.size() && !is_blank(text[i])) ++i;
    const std::string_view field = text.substr(start, i - start);
    if (!have_name) {
      if (field.find('=') != std::string_view::npos)
        return fail(error, "a vendor profile starts with its name, not " + quote(field));
      p.name.assign(field);
      have_name = true;
      if (!valid_name(p.name, kMaxNameBytes)) return validate_profile(p, error);
      continue;
    }
    if (!parse_field(field, p, seen, error)) return false;
  }
  if (!have_name) return fail(error, "a vendor profile needs a name and library=, names=");
  if (!(seen & 1u)) return fail(error, "profile '" + p.name + "' lacks library=<name>[,<name>...]");
  if (!(seen & 2u)) return fail(error, "profile '" + p.name + "' lacks names=plain|prefix:<prefix>");
  if (!validate_profile(p, error)) return false;
  out = std::move(p);
  return true;
}

std::vector<Profile> effective_profiles(const std::vector<Profile>& user) {
  std::vector<Profile> out = user;
  for (const Profile& b : builtin_profiles()) {
    bool replaced = false;
    for (const Profile& u : user) replaced = replaced || u.name == b.name;
    if (!replaced) out.push_back(b);
  }
  return out;
}

int socket_domain(const Profile& p, int tcp_family) {
  if (tcp_family != AF_INET && tcp_family != AF_INET6) return -EAFNOSUPPORT;
  if (tcp_family == AF_INET6 && !p.address.ipv6) return -EAFNOSUPPORT;
  return p.address.socket_family != 0 ? p.address.socket_family : tcp_family;
}

int translate_address(const Profile& p, const struct sockaddr* tcp_addr, socklen_t len,
                      struct sockaddr_storage& out, socklen_t& out_len) {
  if (tcp_addr == nullptr || len < socklen_t(sizeof(sa_family_t))) return -EINVAL;
  sa_family_t family;
  std::memcpy(&family, tcp_addr, sizeof family);  // the caller's buffer may be unaligned
  socklen_t need;
  if (family == AF_INET) need = sizeof(sockaddr_in);
  else if (family == AF_INET6) need = sizeof(sockaddr_in6);
  else return -EAFNOSUPPORT;
  if (len < need) return -EINVAL;
  const int domain = socket_domain(p, family);
  if (domain < 0) return domain;

  out = {};
  std::memcpy(&out, tcp_addr, need);
  // The port sits at the same offset in sockaddr_in and sockaddr_in6.
  static_assert(offsetof(sockaddr_in, sin_port) == offsetof(sockaddr_in6, sin6_port));
  in_port_t port_be;
  std::memcpy(&port_be, reinterpret_cast<char*>(&out) + offsetof(sockaddr_in, sin_port),
              sizeof port_be);
  const uint32_t port = uint32_t(ntohs(port_be)) + p.address.port_offset;
  if (port > 65535) return -EADDRNOTAVAIL;
  // Port 0 (bind to any port) stays 0: the offset applies to a chosen port only.
  if (ntohs(port_be) != 0) port_be = htons(uint16_t(port));
  std::memcpy(reinterpret_cast<char*>(&out) + offsetof(sockaddr_in, sin_port), &port_be,
              sizeof port_be);
  if (p.address.rewrite_sockaddr_family) {
    const auto vendor_family = sa_family_t(p.address.socket_family);
    std::memcpy(&out, &vendor_family, sizeof vendor_family);
  }
  out_len = need;
  return 0;
}

}  // namespace fastsock::vendors
