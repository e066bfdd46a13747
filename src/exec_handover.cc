#include "exec_handover.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fd_table.hpp"
#include "log.hpp"
#include "socket.hpp"
#include "user_io.hpp"

namespace fastsock::exec_handover {

namespace {

// The descriptors of one connection (dup'ed descriptors share a Socket).
struct Group {
  Socket* socket;
  int fds[kMaxFdsPerConn];
  int count;
  bool overflow;  // more descriptors than listed: not handed over (an unlisted one would
                  // be adopted as a TCP socket of its own, beside the link's)
};

struct Groups {
  Group* items = nullptr;
  int count = 0;
  int capacity = 0;
};

void collect(int fd, Socket& s, void* context) {
  if (!ops::user_link(s)) return;
  auto& groups = *static_cast<Groups*>(context);
  for (int i = 0; i < groups.count; ++i) {
    Group& g = groups.items[i];
    if (g.socket != &s) continue;
    if (g.count < kMaxFdsPerConn)
      g.fds[g.count++] = fd;
    else
      g.overflow = true;
    return;
  }
  if (groups.count == groups.capacity) {
    const int capacity = groups.capacity ? groups.capacity * 2 : 16;
    void* grown = std::realloc(groups.items, sizeof(Group) * size_t(capacity));
    if (!grown) return;  // not collected: left as it is (see below)
    groups.items = static_cast<Group*>(grown);
    groups.capacity = capacity;
  }
  groups.items[groups.count++] = Group{&s, {fd}, 1, false};
}

bool is_variable(const char* entry) {
  const size_t n = sizeof kVariable - 1;
  return strncmp(entry, kVariable, n) == 0 && entry[n] == '=';
}

}  // namespace

struct Exec::Handed {
  Socket* socket;
  Transport* link;
  int fd;
};

Exec::Exec(bool follows, char* const envp[]) noexcept : envp_(envp) {
  Groups groups;
  fd_table::for_each_socket(collect, &groups);
  const size_t cap = 64 + size_t(kMaxHanded) * kEntryBytes;
  if (follows && groups.count > 0) {
    variable_ = static_cast<char*>(std::malloc(cap));
    handed_ = static_cast<Handed*>(std::malloc(sizeof(Handed) * kMaxHanded));
    if (!variable_ || !handed_) follows = false;
  }
  size_t used = 0;
  if (variable_) used = size_t(snprintf(variable_, cap, "%s=%d", kVariable, int(::getpid())));
  for (int i = 0; i < groups.count; ++i) {
    Group& g = groups.items[i];
    Transport* link = ops::user_link(*g.socket);
    if (!link) continue;
    int fds[kMaxFdsPerConn];
    int n = 0;
    for (int k = 0; k < g.count; ++k)
      if (inherited_by_exec(g.fds[k])) fds[n++] = g.fds[k];
    char token[kTokenBytes];
    size_t len = 0;
    struct stat st;
    if (follows && n > 0 && !g.overflow && handed_count_ < kMaxHanded && ::fstat(fds[0], &st) == 0)
      len = link->exec_handover(*g.socket, fds[0], token, sizeof token);
    if (len >= sizeof token) {
      link->exec_failed(*g.socket);
      len = 0;
    }
    if (len == 0) {
      // Not inherited (close-on-exec: it closes with the exec), or the new program does not
      // run the library, or the link cannot hand it over now: the kernel carries it.
      link->downgrade(*g.socket, g.fds[0], "exec");
      continue;
    }
    used += format_entry(variable_ + used, cap - used, link->id(),
                         static_cast<unsigned long>(st.st_ino), fds, n, token);
    handed_[handed_count_++] = Handed{g.socket, link, fds[0]};
    LOG_DEBUG("fd=%d continues in the exec'd program", fds[0]);
  }
  std::free(groups.items);

  // The new environment: without any FASTSOCK_EXEC_LINKS it had (stale: from an earlier
  // image), with ours if a connection was handed over.
  size_t count = 0;
  bool stale = false;
  for (char* const* e = envp; e && *e; ++e, ++count) stale |= is_variable(*e);
  if (!stale && handed_count_ == 0) return;
  env_ = static_cast<char**>(std::malloc(sizeof(char*) * (count + 2)));
  if (!env_) {
    // Cannot pass the variable: nothing may continue over this exec.
    failed();
    for (int i = 0; i < handed_count_; ++i)
      handed_[i].link->downgrade(*handed_[i].socket, handed_[i].fd, "exec");
    handed_count_ = 0;
    return;
  }
  size_t n = 0;
  for (char* const* e = envp; e && *e; ++e)
    if (!is_variable(*e)) env_[n++] = *e;
  if (handed_count_ > 0) env_[n++] = variable_;
  env_[n] = nullptr;
}

void Exec::failed() noexcept {
  for (int i = 0; i < handed_count_; ++i) handed_[i].link->exec_failed(*handed_[i].socket);
}

Exec::~Exec() {
  std::free(env_);
  std::free(variable_);
  std::free(handed_);
}

namespace {

const Links& parsed() {
  static const Links* const result = []() -> const Links* {
    static Links links;
    const char* value = getenv(kVariable);
    if (!value) return &links;
    char* copy = strdup(value);  // kept for the process's life: the tokens point into it
    if (!copy) return &links;
    if (const int malformed = parse_links(copy, long(::getpid()), links); malformed > 0)
      LOG_ERROR("%s: %d malformed entries ignored", kVariable, malformed);
    return &links;
  }();
  return *result;
}

}  // namespace

bool inherited_by_exec(int fd) noexcept {
  const long flags = ::syscall(SYS_fcntl, fd, F_GETFD);  // raw: fcntl is hooked
  return flags >= 0 && !(flags & FD_CLOEXEC);
}

Role find(int fd, Entry& out) noexcept { return lookup(parsed(), fd, out); }

void for_each_extra(void (*fn)(int extra_fd, int first_fd)) noexcept {
  const Links& p = parsed();
  for (int i = 0; i < p.count; ++i)
    for (int k = 1; k < p.fd_count[i]; ++k) fn(p.fds[i][k], p.fds[i][0]);
}

}  // namespace fastsock::exec_handover
