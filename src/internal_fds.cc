#include "internal_fds.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>

#include "fd_table.hpp"
#include "mem_watch.hpp"
#include "real.hpp"

namespace fastsock::internal_fds {

namespace {

// A bitmap over every descriptor number, in chunks mapped on first use (zero pages until
// then), like the fd table. Internal descriptors are few; the map only has to make the
// close() check two loads.
constexpr unsigned kWordsPerChunk = 4096;
constexpr unsigned kBitsPerChunk = kWordsPerChunk * 64;
constexpr unsigned kChunks = unsigned(fd_table::kMaxFd) / kBitsPerChunk;
using Word = std::atomic<uint64_t>;
std::atomic<Word*> g_chunks[kChunks];
// One past the highest chunk that ever held a descriptor: range walks stop there.
std::atomic<unsigned> g_chunk_limit{0};

Word* word_of(int fd, bool create) noexcept {
  if (fd < 0 || fd >= fd_table::kMaxFd) return nullptr;
  const unsigned c = unsigned(fd) / kBitsPerChunk;
  Word* chunk = g_chunks[c].load(std::memory_order_acquire);
  if (!chunk && create) {
    void* p = mmap(nullptr, sizeof(Word) * kWordsPerChunk, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* fresh = static_cast<Word*>(p);
    if (g_chunks[c].compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
      unsigned seen = g_chunk_limit.load(std::memory_order_relaxed);
      while (seen < c + 1 && !g_chunk_limit.compare_exchange_weak(seen, c + 1)) {}
    } else {
      munmap(p, sizeof(Word) * kWordsPerChunk);  // another thread won the race
    }
  }
  return chunk ? &chunk[(unsigned(fd) % kBitsPerChunk) / 64] : nullptr;
}

uint64_t bit_of(int fd) noexcept { return uint64_t{1} << (unsigned(fd) % 64); }

std::atomic<long> g_count{0};

constexpr int kMaxBase = 4096;
std::atomic<int> g_base{-1};  // -1: the limit not read yet
std::atomic<long> g_soft{-1}, g_hard{-1};  // -1: not read yet

long clamp_limit(rlim_t v) noexcept {
  return v == RLIM_INFINITY || v > (rlim_t(1) << 30) ? long(1) << 30 : long(v);
}

// The raw system call: the library's own reads and writes of the limit never go through
// its hooks (which would take limit_lock again).
int raw_prlimit(const rlimit* set, rlimit* old) noexcept {
  return int(syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, set, old));
}

Limits read_limits() noexcept {
  rlimit rl{};
  if (raw_prlimit(nullptr, &rl) != 0) return Limits{0, 0};
  const Limits l{clamp_limit(rl.rlim_cur), clamp_limit(rl.rlim_max)};
  g_hard.store(l.hard, std::memory_order_relaxed);
  g_soft.store(l.soft, std::memory_order_relaxed);
  return l;
}

int read_base() noexcept {
  const long half = read_limits().soft / 2;
  const int base = half > kMaxBase ? kMaxBase : int(half);
  g_base.store(base, std::memory_order_relaxed);
  return base;
}

std::mutex g_limit_lock;

// `fd` duplicated at the lowest free number at or above the soft limit (close-on-exec),
// the limit raised for the moment of the dup; -1 when there is no room above the limit, the
// limit cannot be changed, or the limit lock is held. Never waits for that lock: the fork
// hook holds it from its prepare step on, and other prepare steps make descriptors (the
// verbs link's sock_diag socket): waiting there deadlocked every fork of a process whose
// soft limit is below its hard one (rdma_prefork in the VM, limits 1024/4096). Such a
// descriptor goes below the limit instead (placement_base).
int dup_above_limit(int fd) noexcept {
  std::unique_lock lock(g_limit_lock, std::try_to_lock);
  if (!lock.owns_lock()) return -1;
  rlimit now{};
  if (raw_prlimit(nullptr, &now) != 0) return -1;
  const Limits l{clamp_limit(now.rlim_cur), clamp_limit(now.rlim_max)};
  if (room_above(l) == 0) return -1;
  rlimit raised = now;
  raised.rlim_cur = rlim_t(l.soft + room_above(l));
  if (raw_prlimit(&raised, nullptr) != 0) return -1;
  const int moved = real().fcntl(fd, F_DUPFD_CLOEXEC, int(l.soft));
  const int saved_errno = errno;
  (void)raw_prlimit(&now, nullptr);
  errno = saved_errno;
  return moved;
}

constexpr int kMaxHandlers = 4;
std::atomic<ReplacedHandler> g_handlers[kMaxHandlers];

// The lowest internal descriptor in [from, last], or -1.
long next_internal(unsigned from, unsigned last) noexcept {
  const unsigned limit_fd = g_chunk_limit.load(std::memory_order_acquire) * kBitsPerChunk;
  if (limit_fd == 0) return -1;
  if (last >= limit_fd) last = limit_fd - 1;
  for (unsigned fd = from; fd <= last;) {
    Word* chunk = g_chunks[fd / kBitsPerChunk].load(std::memory_order_acquire);
    if (!chunk) {
      fd = (fd / kBitsPerChunk + 1) * kBitsPerChunk;
      continue;
    }
    uint64_t bits = chunk[(fd % kBitsPerChunk) / 64].load(std::memory_order_acquire);
    bits &= ~uint64_t{0} << (fd % 64);
    if (bits) {
      const unsigned found = fd - fd % 64 + unsigned(__builtin_ctzll(bits));
      return found <= last ? long(found) : -1;
    }
    fd = fd - fd % 64 + 64;
  }
  return -1;
}

}  // namespace

void add(int fd) noexcept {
  if (Word* w = word_of(fd, true))
    if (!(w->fetch_or(bit_of(fd), std::memory_order_release) & bit_of(fd)))
      g_count.fetch_add(1, std::memory_order_relaxed);
}

void remove(int fd) noexcept {
  if (Word* w = word_of(fd, false))
    if (w->fetch_and(~bit_of(fd), std::memory_order_release) & bit_of(fd))
      g_count.fetch_sub(1, std::memory_order_relaxed);
}

int placement_base() noexcept {
  const int base = g_base.load(std::memory_order_relaxed);
  return base >= 0 ? base : read_base();
}

Limits nofile() noexcept {
  const long hard = g_hard.load(std::memory_order_relaxed);
  const long soft = g_soft.load(std::memory_order_relaxed);
  return soft < 0 || hard < 0 ? read_limits() : Limits{soft, hard};
}

// These three run inside the rlimit hooks, which a sanitizer's runtime reaches before it
// is set up (ops::prlimit): not instrumented.
FASTSOCK_EARLY_SAFE void forget_limits() noexcept {
  g_soft.store(-1, std::memory_order_relaxed);
  g_base.store(-1, std::memory_order_relaxed);
}

long room_above(const Limits& l) noexcept {
  if (l.soft <= 0 || l.soft >= l.hard || l.soft > kHighMaxSoft) return 0;
  return l.hard - l.soft < kHighRoom ? l.hard - l.soft : kHighRoom;
}

FASTSOCK_EARLY_SAFE void lock_limits() noexcept { g_limit_lock.lock(); }
FASTSOCK_EARLY_SAFE void unlock_limits() noexcept { g_limit_lock.unlock(); }

int take(int fd) noexcept {
  fd = relocate(fd);
  add(fd);
  return fd;
}

namespace {
// A close-on-exec copy of `fd` at the library's place: above the soft limit where there is
// room (and the limit lock is free), else the lowest free number at or above the placement
// base; -1 with errno when nothing is free there.
int copy_to_place(int fd) noexcept {
  if (room_above(nofile()) > 0) {
    const int saved_errno = errno;
    if (const int above = dup_above_limit(fd); above >= 0) return above;
    errno = saved_errno;
  }
  const int copy = real().fcntl(fd, F_DUPFD_CLOEXEC, placement_base());
  // EINVAL: the base is at or above a limit lowered since it was read.
  if (copy < 0 && errno == EINVAL) return real().fcntl(fd, F_DUPFD_CLOEXEC, read_base());
  return copy;
}

// Already where copy_to_place would put it.
bool in_place(int fd) noexcept {
  return fd >= nofile().soft || (room_above(nofile()) == 0 && fd >= placement_base());
}
}  // namespace

int relocate(int fd) noexcept {
  if (fd < 0 || in_place(fd)) return fd;
  const int saved_errno = errno;
  if (const int moved = copy_to_place(fd); moved >= 0) {
    real().close(fd);
    fd = moved;
  }
  errno = saved_errno;
  return fd;
}

int dup(int fd) noexcept {
  int copy = copy_to_place(fd);
  // EMFILE: nothing free above the base (EBADF, a bad `fd`, fails again here).
  if (copy < 0 && errno == EMFILE) copy = real().fcntl(fd, F_DUPFD_CLOEXEC, 0);
  add(copy);
  return copy;
}

long count() noexcept { return g_count.load(std::memory_order_relaxed); }

void on_replaced(ReplacedHandler handler) noexcept {
  for (auto& slot : g_handlers) {
    ReplacedHandler expected = nullptr;
    if (slot.compare_exchange_strong(expected, handler) || expected == handler) return;
  }
}

void replaced(int fd) noexcept {
  for (auto& slot : g_handlers)
    if (ReplacedHandler h = slot.load(std::memory_order_acquire)) h(fd);
  remove(fd);
}

int close(int fd) noexcept {
  remove(fd);
  return real().close(fd);
}

bool contains(int fd) noexcept {
  // Every close() asks: a process that never made an internal descriptor (the usual case
  // when every connection stays on the kernel) answers from one load.
  if (g_chunk_limit.load(std::memory_order_relaxed) == 0) return false;
  const Word* w = word_of(fd, false);
  return w && (w->load(std::memory_order_acquire) & bit_of(fd));
}

long close_range_sparing(unsigned first, unsigned last, int flags) noexcept {
  // Setting close-on-exec on ours is harmless (they have it): only closing must spare them.
  const bool spare = !(flags & CLOSE_RANGE_CLOEXEC);
  while (first <= last) {
    const long hole = spare ? next_internal(first, last) : -1;
    const unsigned end = hole < 0 ? last : unsigned(hole) - 1;
    if (hole < 0 || unsigned(hole) > first) {
      if (real().close_range(first, end, flags) != 0) return -errno;
      flags &= ~int(CLOSE_RANGE_UNSHARE);  // the table is already private after the first
    }
    if (hole < 0 || unsigned(hole) == last) break;
    first = unsigned(hole) + 1;
  }
  return 0;
}

}  // namespace fastsock::internal_fds
