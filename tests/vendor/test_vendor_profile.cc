// Unit tests for transports/vendor/vendor_profile.cc: the built-in profiles, parsing of a
// user profile, symbol names, and address translation.
#include "vendor_profile.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>

using namespace fastsock::vendors;

namespace {

Profile parsed(std::string_view text) {
  Profile p;
  std::string error;
  const bool ok = parse_profile(text, p, error);
  INFO("profile: " << text << " -> " << error);
  REQUIRE(ok);
  return p;
}

std::string parse_error(std::string_view text) {
  Profile p;
  p.name = "untouched";
  std::string error;
  INFO("profile: " << text);
  CHECK_FALSE(parse_profile(text, p, error));
  CHECK(p.name == "untouched");  // out is written only on success
  CHECK_FALSE(error.empty());
  CHECK(error.find('\n') == std::string::npos);
  return error;
}

const Profile& builtin(std::string_view name) {
  for (const Profile& p : builtin_profiles())
    if (p.name == name) return p;
  FAIL("no built-in profile " << name);
  throw;  // not reached
}

sockaddr_in v4(const char* ip, uint16_t port) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  REQUIRE(inet_pton(AF_INET, ip, &in.sin_addr) == 1);
  return in;
}

sockaddr_in6 v6(const char* ip, uint16_t port) {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  REQUIRE(inet_pton(AF_INET6, ip, &in6.sin6_addr) == 1);
  return in6;
}

template <typename Addr>
int translate(const Profile& p, const Addr& in, sockaddr_storage& out, socklen_t& len) {
  return translate_address(p, reinterpret_cast<const sockaddr*>(&in), sizeof in, out, len);
}

}  // namespace

TEST_CASE("built-in profiles are valid and say what the vendors document",
          "[vendor][profile]") {
  REQUIRE(builtin_profiles().size() == 3);
  for (const Profile& p : builtin_profiles()) {
    std::string error;
    INFO(p.name);
    CHECK(validate_profile(p, error));
    CHECK(p.builtin);
    CHECK_FALSE(p.libraries.empty());
  }

  const Profile& rs = builtin("rsocket");
  CHECK(rs.libraries == std::vector<std::string>{"librdmacm.so.1"});
  CHECK(rs.naming == Naming::prefix);
  CHECK(rs.optional == 0);  // rsocket.h declares all fifteen
  CHECK(rs.readiness == Readiness::vendor_poll);
  CHECK(rs.address.socket_family == 0);
  CHECK(rs.address.ipv6);
  CHECK(rs.needs == "/sys/class/infiniband");  // no device, no dlopen of librdmacm
  CHECK(symbol_name(rs, Entry::socket) == "rsocket");
  CHECK(symbol_name(rs, Entry::connect) == "rconnect");
  CHECK(symbol_name(rs, Entry::poll) == "rpoll");
  CHECK(symbol_name(rs, Entry::fcntl) == "rfcntl");

  const Profile& mx = builtin("sockets-mx");
  CHECK(mx.naming == Naming::plain);
  CHECK(mx.address.socket_family == 27);  // AF_MYRI in Myricom's README
  CHECK(mx.readiness == Readiness::kernel_fd);
  CHECK(symbol_name(mx, Entry::socket) == "socket");

  const Profile& ss = builtin("supersockets");
  CHECK(ss.libraries == std::vector<std::string>{"libksupersockets.so"});
  CHECK(ss.naming == Naming::plain);
  CHECK(symbol_name(ss, Entry::recvmsg) == "recvmsg");
}

TEST_CASE("entry names are POSIX's, in Entry's order", "[vendor][profile]") {
  CHECK(entry_name(Entry::socket) == "socket");
  CHECK(entry_name(Entry::recvmsg) == "recvmsg");
  CHECK(entry_name(Entry::fcntl) == "fcntl");
  CHECK(entry_name(Entry(kEntryCount)) == "?");
  Profile p;
  p.readiness = Readiness::kernel_fd;
  CHECK(required_entries(p) == kRequiredEntries);
  CHECK_FALSE(required_entries(p) & entry_bit(Entry::poll));
  p.readiness = Readiness::vendor_poll;
  CHECK(required_entries(p) & entry_bit(Entry::poll));
}

TEST_CASE("parse_profile: a full profile and the defaults", "[vendor][profile][parse]") {
  const Profile p = parsed(
      "tv library=/opt/tv/libtv.so,libtv.so.1 names=prefix:tv optional=sendmsg,recvmsg,fcntl "
      "family=40 sockaddr-family=vendor ipv6=no readiness=fd port-offset=1000 needs=/dev/tv0");
  CHECK(p.name == "tv");
  CHECK(p.needs == "/dev/tv0");
  CHECK(p.libraries == std::vector<std::string>{"/opt/tv/libtv.so", "libtv.so.1"});
  CHECK(p.naming == Naming::prefix);
  CHECK(p.prefix == "tv");
  CHECK(p.optional == (entry_bit(Entry::sendmsg) | entry_bit(Entry::recvmsg) |
                       entry_bit(Entry::fcntl)));
  CHECK(p.address.socket_family == 40);
  CHECK(p.address.rewrite_sockaddr_family);
  CHECK_FALSE(p.address.ipv6);
  CHECK(p.readiness == Readiness::kernel_fd);
  CHECK(p.address.port_offset == 1000);
  CHECK_FALSE(p.builtin);

  const Profile d = parsed("  x_1\tlibrary=libx.so   names=plain  ");
  CHECK(d.name == "x_1");
  CHECK(d.naming == Naming::plain);
  CHECK(d.prefix.empty());
  CHECK(d.optional == 0);
  CHECK(d.address.socket_family == 0);
  CHECK_FALSE(d.address.rewrite_sockaddr_family);
  CHECK(d.address.ipv6);
  CHECK(d.readiness == Readiness::vendor_poll);
  CHECK(d.address.port_offset == 0);
  CHECK(parsed("x library=l names=plain family=same ipv6=yes readiness=poll sockaddr-family=tcp")
            .address.socket_family == 0);
}

TEST_CASE("parse_profile: malformed profiles say what is wrong", "[vendor][profile][parse]") {
  CHECK(parse_error("") == "a vendor profile needs a name and library=, names=");
  CHECK(parse_error("library=x names=plain") ==
        "a vendor profile starts with its name, not 'library=x'");
  CHECK(parse_error("bad.name library=x names=plain").rfind("invalid profile name 'bad.name'", 0) == 0);
  CHECK(parse_error(std::string(33, 'a') + " library=x names=plain")
            .rfind("invalid profile name", 0) == 0);
  CHECK(parse_error("x names=plain") == "profile 'x' lacks library=<name>[,<name>...]");
  CHECK(parse_error("x library=l") == "profile 'x' lacks names=plain|prefix:<prefix>");
  CHECK(parse_error("x library=l names=plain colour=red") ==
        "unknown key 'colour' (valid: library, names, optional, family, sockaddr-family, ipv6, "
        "readiness, port-offset, needs)");
  CHECK(parse_error("x library=l names=plain names=plain") == "key 'names' is given twice");
  CHECK(parse_error("x library=l names=plain needs=dev/tv0") ==
        "invalid needs='dev/tv0' (expected an absolute path of at most 1024 bytes)");
  CHECK(parse_error("x library=l names=plain stray") == "expected <key>=<value>, got 'stray'");
  CHECK(parse_error("x library= names=plain") == "empty value for library=");
  CHECK(parse_error("x library=a,,b names=plain") == "empty item in library='a,,b'");
  CHECK(parse_error("x library=l names=shouty") ==
        "invalid names='shouty' (expected plain or prefix:<prefix>)");
  CHECK(parse_error("x library=l names=prefix:").rfind("invalid prefix '' in profile 'x'", 0) == 0);
  CHECK(parse_error("x library=l names=prefix:a/b").rfind("invalid prefix 'a/b'", 0) == 0);
  CHECK(parse_error("x library=l names=plain optional=sendmsg,frobnicate")
            .rfind("unknown entry point 'frobnicate' in optional= (valid: socket, bind,", 0) == 0);
  CHECK(parse_error("x library=l names=plain optional=send,close,fcntl") ==
        "profile 'x' declares required entry points optional: send, close");
  CHECK(parse_error("x library=l names=plain optional=poll") ==
        "profile 'x' declares required entry points optional: poll (readiness=poll needs poll)");
  CHECK(parsed("x library=l names=plain optional=poll readiness=fd").optional ==
        entry_bit(Entry::poll));
  CHECK(parse_error("x library=l names=plain family=0") ==
        "invalid family='0' (expected same or a number from 1 to 1023)");
  CHECK(parse_error("x library=l names=plain family=1024").rfind("invalid family='1024'", 0) == 0);
  CHECK(parse_error("x library=l names=plain family=-2").rfind("invalid family='-2'", 0) == 0);
  CHECK(parse_error("x library=l names=plain sockaddr-family=vendor") ==
        "profile 'x' has sockaddr-family=vendor without a vendor family (family=<number>)");
  CHECK(parse_error("x library=l names=plain sockaddr-family=both") ==
        "invalid sockaddr-family='both' (expected tcp or vendor)");
  CHECK(parse_error("x library=l names=plain ipv6=maybe") ==
        "invalid ipv6='maybe' (expected yes or no)");
  CHECK(parse_error("x library=l names=plain readiness=epoll") ==
        "invalid readiness='epoll' (expected poll or fd)");
  CHECK(parse_error("x library=l names=plain port-offset=65536") ==
        "invalid port-offset='65536' (expected 0 to 65535)");
  CHECK(parse_error("x library=a,b,c,d,e,f,g,h,i names=plain") ==
        "more than 8 libraries in library=");
  CHECK(parse_error("x library=" + std::string(1025, 'l') + " names=plain")
            .find("is longer than 1024 bytes") != std::string::npos);
  // Hostile bytes are quoted, escaped and cut.
  const std::string e =
      parse_error("x library=l names=plain \x01" + std::string(60, 'z') + "=v");
  CHECK(e.rfind("unknown key '\\x01zzz", 0) == 0);
  CHECK(e.find("\\x01") != std::string::npos);
  CHECK(e.find("...'") != std::string::npos);
}

TEST_CASE("effective_profiles: the user's first, replacing built-ins of the same name",
          "[vendor][profile]") {
  std::vector<Profile> user{parsed("tv library=libtv.so names=prefix:tv"),
                            parsed("rsocket library=/opt/rdma/librdmacm.so.1 names=prefix:r")};
  const auto all = effective_profiles(user);
  REQUIRE(all.size() == 4);
  CHECK(all[0].name == "tv");
  CHECK(all[1].name == "rsocket");
  CHECK(all[1].libraries[0] == "/opt/rdma/librdmacm.so.1");
  CHECK_FALSE(all[1].builtin);
  CHECK(all[2].name == "sockets-mx");
  CHECK(all[3].name == "supersockets");
  CHECK(effective_profiles({}).size() == builtin_profiles().size());
}

TEST_CASE("socket_domain: the vendor's family, or the connection's", "[vendor][address]") {
  const Profile same = parsed("a library=l names=plain");
  CHECK(socket_domain(same, AF_INET) == AF_INET);
  CHECK(socket_domain(same, AF_INET6) == AF_INET6);
  CHECK(socket_domain(same, AF_UNIX) == -EAFNOSUPPORT);
  const Profile mx = builtin("sockets-mx");
  CHECK(socket_domain(mx, AF_INET) == 27);
  CHECK(socket_domain(mx, AF_INET6) == -EAFNOSUPPORT);  // ipv6=no
}

TEST_CASE("translate_address: as is, family rewritten, port offset", "[vendor][address]") {
  sockaddr_storage out{};
  socklen_t len = 0;

  const Profile same = parsed("a library=l names=plain");
  const sockaddr_in in = v4("10.1.2.3", 5000);
  REQUIRE(translate(same, in, out, len) == 0);
  CHECK(len == sizeof(sockaddr_in));
  CHECK(std::memcmp(&out, &in, sizeof in) == 0);

  const sockaddr_in6 in6 = v6("fe80::1", 443);
  REQUIRE(translate(same, in6, out, len) == 0);
  CHECK(len == sizeof(sockaddr_in6));
  CHECK(std::memcmp(&out, &in6, sizeof in6) == 0);

  // Sockets-MX: socket(27, ...) but the address stays AF_INET (sockaddr-family=tcp).
  REQUIRE(translate(builtin("sockets-mx"), in, out, len) == 0);
  CHECK(out.ss_family == AF_INET);
  CHECK(translate(builtin("sockets-mx"), in6, out, len) == -EAFNOSUPPORT);

  const Profile rewrite =
      parsed("b library=l names=plain family=40 sockaddr-family=vendor port-offset=1000");
  REQUIRE(translate(rewrite, in, out, len) == 0);
  sockaddr_in got;
  std::memcpy(&got, &out, sizeof got);
  CHECK(got.sin_family == 40);
  CHECK(ntohs(got.sin_port) == 6000);
  CHECK(got.sin_addr.s_addr == in.sin_addr.s_addr);
  REQUIRE(translate(rewrite, in6, out, len) == 0);
  sockaddr_in6 got6;
  std::memcpy(&got6, &out, sizeof got6);
  CHECK(got6.sin6_family == 40);
  CHECK(ntohs(got6.sin6_port) == 1443);
  CHECK(std::memcmp(&got6.sin6_addr, &in6.sin6_addr, 16) == 0);

  // Port 0 (bind to any port) stays 0; a port pushed past 65535 is refused.
  REQUIRE(translate(rewrite, v4("0.0.0.0", 0), out, len) == 0);
  std::memcpy(&got, &out, sizeof got);
  CHECK(got.sin_port == 0);
  CHECK(translate(rewrite, v4("10.0.0.1", 65000), out, len) == -EADDRNOTAVAIL);
  CHECK(translate(rewrite, v4("10.0.0.1", 64535), out, len) == 0);

  // Short, absent and foreign addresses.
  CHECK(translate_address(same, reinterpret_cast<const sockaddr*>(&in), sizeof in - 1, out,
                          len) == -EINVAL);
  CHECK(translate_address(same, nullptr, 0, out, len) == -EINVAL);
  sockaddr_storage unix_addr{};
  unix_addr.ss_family = AF_UNIX;
  CHECK(translate_address(same, reinterpret_cast<const sockaddr*>(&unix_addr),
                          sizeof unix_addr, out, len) == -EAFNOSUPPORT);
}
