// A vendor socket library described as data: a profile (docs/vendor.md).
//
// Vendor socket libraries — rsocket (librdmacm), Myricom's Sockets-MX, Dolphin's SuperSockets
// — all offer the BSD socket calls, but differ in how the calls are named (rsocket prefixes
// them with 'r'; the others replace libc's own names, as a preload library does), in the
// address family their sockets take, and in whether their descriptors are kernel descriptors
// that poll() understands. A profile states those differences, so one adapter
// (vendor_lib.hpp) can load any of them at run time, and a user can describe a library
// this build does not know in the rules file, without a rebuild.
//
// This file is pure (no I/O, no dlopen): the configuration parser (src/config.cc) reads
// `vendor` lines with it, so a malformed profile is reported like any other malformed
// setting, and the unit tests and the config fuzzer drive it directly.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fastsock::vendors {

// The socket entry points the adapter resolves, in a fixed order (also the order of
// vendors::Api's members).
enum class Entry : uint8_t {
  socket, bind, listen, accept, connect, send, recv, sendmsg, recvmsg, poll, close,
  shutdown, setsockopt, getsockopt, fcntl,
};
inline constexpr int kEntryCount = 15;

using EntryMask = uint16_t;
constexpr EntryMask entry_bit(Entry e) { return EntryMask(1u << unsigned(e)); }
inline constexpr EntryMask kAllEntries = EntryMask((1u << kEntryCount) - 1);

// Without these a library cannot carry a connection at all: make one (socket, connect),
// accept one (bind, listen, accept), move bytes (send, recv) and end it (close). A profile
// may declare any other entry absent; the adapter then does without it (sendmsg by send,
// no socket options, ...). poll is also required when readiness is Readiness::vendor_poll.
inline constexpr EntryMask kRequiredEntries = EntryMask(
    entry_bit(Entry::socket) | entry_bit(Entry::bind) | entry_bit(Entry::listen) |
    entry_bit(Entry::accept) | entry_bit(Entry::connect) | entry_bit(Entry::send) |
    entry_bit(Entry::recv) | entry_bit(Entry::close));

// The POSIX name of an entry: "socket", "bind", ...
std::string_view entry_name(Entry e);

// How the library's socket calls are named.
enum class Naming : uint8_t {
  plain,   // libc's own names (socket, connect, ...), as a preload library exports them
  prefix,  // a prefix before each name: rsocket's rsocket, rconnect, rpoll, ...
};

// How the adapter learns that a vendor socket is readable or writable.
enum class Readiness : uint8_t {
  vendor_poll,  // only through the library's poll entry: its descriptors are not kernel
                // descriptors (rsocket(7): "rsocket fd's cannot be passed into non-rsocket
                // calls")
  kernel_fd,    // its descriptors are kernel descriptors: poll, epoll and the core's
                // readiness merging can watch them directly
};

// How a TCP connection's addresses become the library's.
struct AddressRule {
  // The domain passed to the library's socket(); 0 means the TCP connection's own
  // (AF_INET or AF_INET6). Sockets-MX, for one, is a protocol family of its own (AF_MYRI).
  int socket_family = 0;
  // Whether the addresses given to bind() and connect() carry socket_family in their
  // sa_family field too (the rest of the sockaddr_in/sockaddr_in6 is kept as it is).
  bool rewrite_sockaddr_family = false;
  // Whether IPv6 connections may use the library; when not, they skip this link.
  bool ipv6 = true;
  // The library listens and connects on the TCP port plus this offset: a library whose
  // sockets share the kernel's TCP port space cannot listen on the TCP listener's own port.
  uint16_t port_offset = 0;
};

struct Profile {
  std::string name;                    // [A-Za-z0-9_-], at most kMaxNameBytes
  std::vector<std::string> libraries;  // sonames or paths, tried in order
  Naming naming = Naming::prefix;
  std::string prefix;                  // for Naming::prefix
  EntryMask optional = 0;              // entries the library may lack
  AddressRule address;
  Readiness readiness = Readiness::vendor_poll;
  // A path that must exist (a directory: with at least one entry) before the library is
  // even loaded: the cheap sign that the vendor's hardware is there (rsocket:
  // /sys/class/infiniband). Empty: no such check.
  std::string needs;
  // The library listens in the RDMA CM's TCP port space, as the verbs link does (rsocket):
  // next to a verbs listener on the same port it could only fail (EADDRINUSE), and the
  // verbs link, earlier in the chain, carries what it would.
  bool rdma_cm_ports = false;
  bool builtin = false;
  int line = 0;                        // rules file line of a user profile, else 0
};

inline constexpr size_t kMaxNameBytes = 32;
inline constexpr size_t kMaxPrefixBytes = 16;
inline constexpr size_t kMaxLibraryBytes = 1024;
inline constexpr size_t kMaxLibraries = 8;
inline constexpr size_t kMaxUserProfiles = 16;

// The symbol the library exports for `e`: the prefix followed by the name, or the name.
std::string symbol_name(const Profile& p, Entry e);

// The entries `p` cannot do without (kRequiredEntries, plus poll for vendor_poll).
EntryMask required_entries(const Profile& p);

// The profiles this build ships: rsocket, sockets-mx, supersockets (docs/vendor.md says
// where each fact comes from and which are assumptions).
const std::vector<Profile>& builtin_profiles();

// Parses a profile from the fields that follow the `vendor` keyword of a rules file line:
//   <name> library=<lib>[,<lib>...] names=plain|prefix:<p> [optional=<entry>[,<entry>...]]
//          [family=same|<number>] [sockaddr-family=tcp|vendor] [ipv6=yes|no]
//          [readiness=poll|fd] [port-offset=<0..65535>] [needs=<absolute path>]
// On error writes one sentence (no trailing period, hostile text quoted) to `error`.
bool parse_profile(std::string_view text, Profile& out, std::string& error);

// Checks the consistency rules parse_profile applies (also to the built-ins).
bool validate_profile(const Profile& p, std::string& error);

// The profiles the vendor link tries, in order: the user's, in file order, then each
// built-in that no user profile of the same name replaces.
std::vector<Profile> effective_profiles(const std::vector<Profile>& user);

// The domain for the library's socket() when the TCP connection is of `tcp_family`, or
// -EAFNOSUPPORT when the profile does not take that family.
int socket_domain(const Profile& p, int tcp_family);

// Turns a TCP address (sockaddr_in or sockaddr_in6: the peer's for connect, the listener's
// for bind) into the library's. Returns 0, or -EAFNOSUPPORT (family not taken), -EINVAL
// (short or unknown address), -EADDRNOTAVAIL (port plus offset beyond 65535).
int translate_address(const Profile& p, const struct sockaddr* tcp_addr, socklen_t len,
                      struct sockaddr_storage& out, socklen_t& out_len);

}  // namespace fastsock::vendors
