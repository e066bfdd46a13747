#include "exec_links.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastsock::exec_handover {

size_t format_entry(char* out, size_t cap, TransportId link, unsigned long inode,
                    const int* fds, int n, const char* token) {
  // Each piece is written at min(used, cap): once truncated, the rest only counts.
  size_t used = 0;
  auto put = [&](const char* format, auto value) {
    const size_t at = used < cap ? used : cap;
    const int k = snprintf(out + at, cap - at, format, value);
    if (k > 0) used += size_t(k);
  };
  put(";%d/", int(link));
  put("%lu/", inode);
  for (int k = 0; k < n; ++k) put(k ? ",%d" : "%d", fds[k]);
  put("/%s", token);
  return used;
}

namespace {

// "<link id>/<inode>/<fd>[,<fd>...]/<token>", modified in place (the token is terminated).
bool parse_entry(char* text, Links& p) {
  const int i = p.count;
  char* end = nullptr;
  const long id = strtol(text, &end, 10);
  if (end == text || *end != '/' || id < 0 || id >= kTransportCount) return false;
  text = end + 1;
  const unsigned long inode = strtoul(text, &end, 10);
  if (end == text || *end != '/') return false;
  text = end + 1;
  int n = 0;
  for (;;) {
    const long fd = strtol(text, &end, 10);
    if (end == text || fd < 0 || fd > INT32_MAX || n == kMaxFdsPerConn) return false;
    p.fds[i][n++] = int(fd);
    text = end + 1;
    if (*end == '/') break;
    if (*end != ',') return false;
  }
  p.entries[i] = Entry{TransportId(id), inode, p.fds[i][0], text};
  p.fd_count[i] = n;
  ++p.count;
  return true;
}

}  // namespace

int parse_links(char* text, long pid, Links& out) {
  out.count = 0;
  char* save = nullptr;
  char* part = strtok_r(text, ";", &save);
  if (!part || atol(part) != pid) return 0;  // not for this process
  int malformed = 0;
  while (out.count < kMaxHanded && (part = strtok_r(nullptr, ";", &save)))
    if (!parse_entry(part, out)) ++malformed;
  return malformed;
}

Role lookup(const Links& links, int fd, Entry& out) {
  for (int i = 0; i < links.count; ++i) {
    for (int k = 0; k < links.fd_count[i]; ++k) {
      if (links.fds[i][k] != fd) continue;
      out = links.entries[i];
      return k == 0 ? Role::first : Role::extra;
    }
  }
  return Role::none;
}

}  // namespace fastsock::exec_handover
