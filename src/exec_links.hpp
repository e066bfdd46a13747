// The text of FASTSOCK_EXEC_LINKS (src/exec_handover.hpp): writing one entry and reading a
// whole value, with no process state (no getenv, no getpid, no logging), so that the unit
// tests and the fuzzer (tests/fuzz/fuzz_exec_links.cc) run exactly what the library runs.
//
//   <pid>;<link id>/<socket inode>/<fd>[,<fd>...]/<link's token>;...
#pragma once

#include <cstddef>

#include "transport_id.hpp"

namespace fastsock::exec_handover {

// Bounds: the environment variable stays a few KiB; connections beyond these limits are
// downgraded as before.
inline constexpr int kMaxHanded = 64;
inline constexpr int kMaxFdsPerConn = 8;
inline constexpr size_t kTokenBytes = 200;  // a link's token, with its NUL
// The longest entry format_entry writes for a token shorter than kTokenBytes (the
// environment variable is allocated for kMaxHanded of them).
inline constexpr size_t kEntryBytes = kTokenBytes + 16 * (kMaxFdsPerConn + 4);

// In the new image: what the previous image said about one connection.
struct Entry {
  TransportId link;
  unsigned long inode;
  int first_fd;     // the descriptor the connection is adopted through
  const char* token;
};
enum class Role { none, first, extra };

// A parsed value. Entry i lists fds[i][0 .. fd_count[i]).
struct Links {
  Entry entries[kMaxHanded];
  int fds[kMaxHanded][kMaxFdsPerConn];
  int fd_count[kMaxHanded];
  int count = 0;
};

// Writes one entry, ";<link id>/<inode>/<fd>[,<fd>...]/<token>", at `out` (NUL-terminated,
// truncated to `cap` as by snprintf). Returns its length (>= cap: it did not fit). `fds`
// holds 1..kMaxFdsPerConn non-negative descriptors; `token` has no ';' (it ends the entry).
size_t format_entry(char* out, size_t cap, TransportId link, unsigned long inode,
                    const int* fds, int n, const char* token);

// Reads `text`, a value of the variable, in place: every entry's ';' becomes a NUL and its
// token points into `text`, which must outlive `out`. A value written for another pid than
// `pid` yields no entry (a copy inherited through fork, or stale). Entries beyond
// kMaxHanded are ignored; malformed ones are skipped and counted: the return value (the
// caller logs, this stays pure).
int parse_links(char* text, long pid, Links& out);

// The entry that lists `fd` (the first one, if several do), and whether `fd` is its first
// descriptor.
Role lookup(const Links& links, int fd, Entry& out);

}  // namespace fastsock::exec_handover
