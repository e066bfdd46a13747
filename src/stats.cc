#include "stats.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "config_load.hpp"
#include "log.hpp"
#include "process.hpp"
#include "real.hpp"

namespace fastsock::stats {

namespace {

std::mutex g_mutex;                 // publication only; slots are claimed lock-free
Area* g_area = nullptr;             // mapped at a fixed address for the process's lifetime
// The pid whose file name is linked, 0 if none. Written under g_mutex; atomic because
// before_exit() reads it without the lock.
std::atomic<int> g_published_pid{0};
bool g_failed = false;              // creation failed once: do not retry on every socket
std::atomic<Area*> g_ready{nullptr};
std::atomic<uint32_t> g_hint{0};

// The live slots as they were at the moment of the last fork, taken in the parent before
// the fork. The child must not copy from the shared area after the fork: by then the
// parent may already have retired a slot and reused it for a new connection, and the
// child would take that connection's counters and addresses as its own (seen as a
// listener "closing" with the parent's client's byte count). Private memory, so the child
// reads its copy-on-write view of the fork instant. Untouched (and so free) until a
// process with stats forks.
struct ForkSnapshot {
  alignas(Slot) unsigned char slots[kSlotCount][sizeof(Slot)];
  bool live[kSlotCount];
};
ForkSnapshot g_fork_snapshot;

uint64_t process_start_ticks(int pid) noexcept {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = real().read(fd, buf, sizeof buf - 1);
  real().close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name may contain spaces and parentheses: fields restart after the last ')'.
  const char* p = strrchr(buf, ')');
  if (!p) return 0;
  unsigned long long ticks = 0;
  // After ')' come fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt
  // majflt cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime(22).
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &ticks) != 1)
    return 0;
  return ticks;
}

bool slot_live(const Slot& slot) noexcept {
  return slot.state.load(std::memory_order_relaxed) != uint32_t(SlotState::free);
}

void take_fork_snapshot(const Area& area) noexcept {
  for (uint32_t i = 0; i < kSlotCount; ++i) {
    g_fork_snapshot.live[i] = slot_live(area.slots[i]);
    if (g_fork_snapshot.live[i])
      std::memcpy(g_fork_snapshot.slots[i], static_cast<const void*>(&area.slots[i]), sizeof(Slot));
  }
}

// Writes the slots to keep into the new file, so a forked child (or a process whose exec
// failed) keeps describing the connections it inherited. Free slots stay holes.
bool write_slot(int fd, uint32_t index, const void* bytes) noexcept {
  off_t at = off_t(offsetof(Area, slots) + index * sizeof(Slot));
  return pwrite(fd, bytes, sizeof(Slot), at) == ssize_t(sizeof(Slot));
}

enum class CopyFrom { fork_snapshot, current };

bool copy_live_slots(int fd, const Area& area, CopyFrom from) noexcept {
  for (uint32_t i = 0; i < kSlotCount; ++i) {
    bool ok = true;
    if (from == CopyFrom::fork_snapshot) {
      if (g_fork_snapshot.live[i]) ok = write_slot(fd, i, g_fork_snapshot.slots[i]);
    } else if (slot_live(area.slots[i])) {
      ok = write_slot(fd, i, &area.slots[i]);
    }
    if (!ok) return false;
  }
  return true;
}

// Creates the file for `pid` and maps it: at a fresh address, or over `replace` (so the
// slot pointers Sockets hold stay valid after fork and failed exec), copying live slots.
Area* create_file(int pid, Area* replace, CopyFrom from) noexcept {
  char path[64];
  area_path(pid, path, sizeof path);
  int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  int fd = ::open(path, flags, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A previous process with our pid died without cleaning up: its file is stale.
    ::unlink(path);
    fd = ::open(path, flags, 0600);
  }
  if (fd < 0) {
    LOG_WARN("stats disabled: cannot create %s: %s", path, strerrordesc_np(errno));
    return nullptr;
  }
  void* addr = MAP_FAILED;
  if (ftruncate(fd, off_t(kAreaSize)) == 0 && (!replace || copy_live_slots(fd, *replace, from)))
    addr = mmap(replace, kAreaSize, PROT_READ | PROT_WRITE,
                MAP_SHARED | (replace ? MAP_FIXED : 0), fd, 0);
  int err = errno;
  real().close(fd);
  if (addr == MAP_FAILED) {
    ::unlink(path);
    LOG_WARN("stats disabled: cannot map %s: %s", path, strerrordesc_np(err));
    return nullptr;
  }
  return static_cast<Area*>(addr);
}

void fill_header(Area& area, int pid) noexcept {
  Header& h = area.header;
  h.version = kStatsVersion;
  h.slot_count = kSlotCount;
  h.pid = pid;
  h.start_time_ticks = process_start_ticks(pid);
  snprintf(h.program, sizeof h.program, "%s", program_invocation_short_name);
  const Config& cfg = config();
  size_t used = 0;
  h.chain[0] = '\0';
  for (TransportId id : cfg.chain) {
    auto name = transport_name(id);
    int n = snprintf(h.chain + used, sizeof h.chain - used, "%s%.*s", used ? "," : "",
                     int(name.size()), name.data());
    if (n < 0 || size_t(n) >= sizeof h.chain - used) break;
    used += size_t(n);
  }
  snprintf(h.config_error, sizeof h.config_error, "%s", cfg.error.c_str());
  // Readers check the magic last-written: the header is complete once it is there.
  std::atomic_ref<uint64_t>(h.magic).store(kStatsMagic, std::memory_order_release);
}

Area* publish() noexcept {
  std::lock_guard lock(g_mutex);
  if (Area* a = g_ready.load(std::memory_order_acquire)) return a;
  if (g_failed || !config().stats_enabled) return nullptr;
  const int pid = getpid();
  Area* area = create_file(pid, nullptr, CopyFrom::current);
  if (!area) {
    g_failed = true;
    return nullptr;
  }
  fill_header(*area, pid);
  g_area = area;
  g_published_pid = pid;
  g_ready.store(area, std::memory_order_release);
  return area;
}

// A forked child that cannot have its own file keeps its slots in anonymous private memory
// over the old view: `fastsock stat` cannot show them, but the child no longer writes into
// its parent's area.
void keep_fork_snapshot_private() noexcept {
  void* addr = mmap(g_area, kAreaSize, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (addr == MAP_FAILED) return;  // keep the shared view: counters may mix, nothing breaks
  for (uint32_t i = 0; i < kSlotCount; ++i)
    if (g_fork_snapshot.live[i])
      std::memcpy(static_cast<void*>(&g_area->slots[i]), g_fork_snapshot.slots[i], sizeof(Slot));
}

// Gives this process its own file with the slots it owns, mapped over the old view.
void republish_copy(CopyFrom from) noexcept {
  if (!g_area) return;
  const int pid = getpid();
  if (!create_file(pid, g_area, from)) {
    // (After a failed exec the old view, whose file before_exec unlinked, is still ours.)
    if (from == CopyFrom::fork_snapshot) keep_fork_snapshot_private();
    g_published_pid = 0;
    return;
  }
  fill_header(*g_area, pid);
  g_published_pid = pid;
}

void unlink_published() noexcept {
  if (g_published_pid != 0 && g_published_pid == getpid()) {
    char path[64];
    area_path(g_published_pid, path, sizeof path);
    ::unlink(path);
  }
  g_published_pid = 0;
}

// The file's path for `pid` with nothing but stores: before_exit() may run in a signal
// handler, where snprintf is not allowed.
void area_path_signal_safe(int pid, char* out, size_t out_len) noexcept {
  char digits[16];
  size_t n = 0;
  for (unsigned v = unsigned(pid); n < sizeof digits && (v != 0 || n == 0); v /= 10)
    digits[n++] = char('0' + v % 10);
  size_t len = 0;
  for (const char* p = kStatsPrefix; *p && len + 1 < out_len; ++p) out[len++] = *p;
  while (n > 0 && len + 1 < out_len) out[len++] = digits[--n];
  out[len] = '\0';
}

void fork_prepare() noexcept {
  g_mutex.lock();
  if (g_area) take_fork_snapshot(*g_area);
}
void fork_parent() noexcept { g_mutex.unlock(); }
void fork_child() noexcept {
  g_mutex.unlock();
  republish_copy(CopyFrom::fork_snapshot);
}
const bool g_registered =
    (register_fork_handlers(ForkHandlers{fork_prepare, fork_parent, fork_child}), true);

// Normal exit: remove the file. (A process killed by a signal cannot; `fastsock stat`
// removes files whose process is gone.)
__attribute__((destructor)) void unlink_at_exit() {
  std::lock_guard lock(g_mutex);
  unlink_published();
}

}  // namespace

void area_path(int pid, char* out, unsigned long out_len) noexcept {
  snprintf(out, out_len, "%s%d", kStatsPrefix, pid);
}

Slot* claim_slot() noexcept {
  Area* area = g_ready.load(std::memory_order_acquire);
  if (!area && !(area = publish())) return nullptr;
  const uint32_t start = g_hint.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < kSlotCount; ++i) {
    Slot& slot = area->slots[(start + i) % kSlotCount];
    uint32_t expected = uint32_t(SlotState::free);
    // A claimed slot is `closed` until its owner fills it and marks it live.
    if (slot.state.load(std::memory_order_relaxed) == expected &&
        slot.state.compare_exchange_strong(expected, uint32_t(SlotState::closed),
                                           std::memory_order_acquire)) {
      g_hint.store((start + i + 1) % kSlotCount, std::memory_order_relaxed);
      area->header.total_connections.fetch_add(1, std::memory_order_relaxed);
      return &slot;
    }
  }
  area->header.untracked.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void retire_slot(Slot* slot) noexcept {
  slot->bytes_sent.store(0, std::memory_order_relaxed);
  slot->bytes_received.store(0, std::memory_order_relaxed);
  slot->state.store(uint32_t(SlotState::free), std::memory_order_release);
  // The next connection takes this slot again: under connection churn the same few cache
  // lines are reused instead of sweeping through the whole 1 MiB area.
  if (Area* area = g_ready.load(std::memory_order_relaxed))
    g_hint.store(uint32_t(slot - area->slots), std::memory_order_relaxed);
}

void before_exit() noexcept {
  const int pid = g_published_pid.load(std::memory_order_acquire);
  if (pid == 0 || pid != getpid()) return;  // none, or the parent's (a child before republishing)
  char path[64];
  area_path_signal_safe(pid, path, sizeof path);
  ::unlink(path);
}

void before_exec() noexcept {
  std::lock_guard lock(g_mutex);
  unlink_published();
}

void after_failed_exec() noexcept {
  std::lock_guard lock(g_mutex);
  republish_copy(CopyFrom::current);
}

namespace {
// Gives the published file to `uid` (by path, never following a link: the file is ours,
// made with O_EXCL | O_NOFOLLOW). Without the privilege to (a process that only switches
// between its own uids), the file stays as it is: such a process cannot remove it at exit.
bool give_file_to(unsigned uid) noexcept {
  if (g_published_pid == 0 || g_published_pid != getpid()) return false;
  char path[64];
  area_path(g_published_pid, path, sizeof path);
  return fchownat(AT_FDCWD, path, uid_t(uid), gid_t(-1), AT_SYMLINK_NOFOLLOW) == 0;
}
}  // namespace

unsigned before_uid_change(unsigned new_euid) noexcept {
  const unsigned old_euid = geteuid();
  if (new_euid == kUnchanged || new_euid == old_euid) return kUnchanged;
  std::lock_guard lock(g_mutex);
  return give_file_to(new_euid) ? old_euid : kUnchanged;
}

void after_failed_uid_change(unsigned old_owner) noexcept {
  if (old_owner == kUnchanged) return;
  std::lock_guard lock(g_mutex);
  (void)give_file_to(old_owner);
}

}  // namespace fastsock::stats
