#include "stats.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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
int g_published_pid = 0;            // the pid whose file name is linked, 0 if none
bool g_failed = false;              // creation failed once: do not retry on every socket
std::atomic<Area*> g_ready{nullptr};
std::atomic<uint32_t> g_hint{0};

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

// Writes the live slots of `from` into the new file, so a forked child (or a process whose
// exec failed) keeps describing the connections it inherited. Free slots stay holes.
bool copy_live_slots(int fd, const Area& from) noexcept {
  for (uint32_t i = 0; i < kSlotCount; ++i) {
    const Slot& slot = from.slots[i];
    if (slot.state.load(std::memory_order_relaxed) == uint32_t(SlotState::free)) continue;
    off_t at = off_t(offsetof(Area, slots) + i * sizeof(Slot));
    if (pwrite(fd, &slot, sizeof slot, at) != ssize_t(sizeof slot)) return false;
  }
  return true;
}

// Creates the file for `pid` and maps it: at a fresh address, or over `replace` (so the
// slot pointers Sockets hold stay valid after fork and failed exec), copying its live slots.
Area* create_file(int pid, Area* replace) noexcept {
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
  if (ftruncate(fd, off_t(kAreaSize)) == 0 && (!replace || copy_live_slots(fd, *replace)))
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
  Area* area = create_file(pid, nullptr);
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

// Gives this process its own file with the current contents, mapped over the old view.
void republish_copy() noexcept {
  if (!g_area) return;
  const int pid = getpid();
  if (!create_file(pid, g_area)) {
    // Keep counting into the old view, but it no longer carries this process's name.
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

void fork_prepare() noexcept { g_mutex.lock(); }
void fork_parent() noexcept { g_mutex.unlock(); }
void fork_child() noexcept {
  g_mutex.unlock();
  republish_copy();
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

void before_exec() noexcept {
  std::lock_guard lock(g_mutex);
  unlink_published();
}

void after_failed_exec() noexcept {
  std::lock_guard lock(g_mutex);
  republish_copy();
}

}  // namespace fastsock::stats
