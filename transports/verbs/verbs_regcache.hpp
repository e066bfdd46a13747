// The pin-down cache: memory registrations of the application's buffers, kept between sends
// so that a program sending from the same buffers registers them once (docs/verbs.md,
// "Zero-copy sends").
//
// A registration pins the pages its range had when it was made. When the application frees,
// unmaps or remaps that memory, the hooks of src/mem_watch.hpp report the range before it
// changes and every cached registration overlapping it is marked dead, so that no later send
// takes its old pages for the new ones. A dead registration is deregistered once no send
// holds it. The invalidation is lock-free and allocation-free (it runs inside free and
// munmap); taking and giving back are serialised by a mutex.
//
// When the process's frees pass where no hook sees them (mem_watch::frees_watched() false:
// AddressSanitizer, an allocator linked into the executable), nothing is cached: each
// acquire registers, and the release deregisters.
//
// One cache per process, for every protection domain it uses (entries name theirs).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "verbs_lib.hpp"

namespace fastsock::verbs {

class RegCache {
 public:
  static constexpr uint32_t kEntries = 32;
  // What one miss registers at most past the bytes asked for (to the end of the caller's
  // buffer): a long buffer sent in pieces is registered in a few windows, not per piece.
  static constexpr size_t kWindow = 4u << 20;
  // Registered bytes the cache keeps at most (idle entries are evicted beyond it).
  static constexpr size_t kMaxBytes = 64u << 20;

  struct Ref {
    ibv_mr* mr = nullptr;  // null: not registered (the caller copies instead)
    uint32_t index = 0;
    uint32_t gen = 0;
    uintptr_t lo = 0, hi = 0;  // the registered range
  };
  struct Counters {
    uint64_t hits, registrations, invalidated;
  };

  static RegCache& get() noexcept;

  // A registration in `pd` covering [addr, addr + len), which lies inside the caller's buffer
  // ending at `limit`; held until release(). Ref::mr null if the range cannot be registered
  // (read-only memory, RLIMIT_MEMLOCK) or is not known to be reused: a buffer is registered
  // at its second send, if it was not freed or unmapped since the first (admission on
  // second use). Registering costs more than copying it once; a program that sends each
  // message from a fresh allocation would register, deregister at its free, and lose
  // (about half the throughput of rdma_link_delete's Python streams, which do that), while
  // one that reuses its buffers pays once.
  Ref acquire(const Lib& lib, ibv_pd* pd, const uint8_t* addr, size_t len,
              const uint8_t* limit) noexcept;
  void release(const Lib& lib, Ref ref) noexcept;
  // One more hold on a registration the caller holds (its next message lies in the same
  // range): true, or false if it was dropped meanwhile. Also when nothing is cached, so a
  // send registers its buffer once, not per message.
  bool retain(Ref ref) noexcept;
  // Deregisters every registration in `pd`, held or not (the device goes: its queue pairs
  // are destroyed already, so no send uses them).
  void drop_pd(const Lib& lib, ibv_pd* pd) noexcept;
  // fork: the mutex is held across it; the child forgets every entry (the registrations are
  // its parent's, on the parent's device context) without deregistering.
  void fork_prepare() noexcept { mutex_.lock(); }
  void fork_parent() noexcept { mutex_.unlock(); }
  void fork_child() noexcept;

  Counters counters() const noexcept;
  // The mem_watch callback: every live entry overlapping [lo, hi) is dead.
  static void invalidate(uintptr_t lo, uintptr_t hi) noexcept;

 private:
  enum State : uint32_t { kEmpty, kBusy, kLive, kDead };
  struct Entry {
    std::atomic<uint32_t> state{kEmpty};
    std::atomic<uintptr_t> lo{0}, hi{0};
    uint32_t refs = 0;  // under mutex_
    uint32_t gen = 0;   // under mutex_: bumped at each fill
    ibv_pd* pd = nullptr;
    ibv_mr* mr = nullptr;
    uint64_t last_use = 0;
  };

  // Entries dead and unheld, and (beyond kMaxBytes, or with no empty entry) the least
  // recently used unheld live ones, are taken out (kBusy) into `out`; their count. mutex_ held.
  uint32_t collect_locked(uint32_t* out, size_t adding) noexcept;
  void deregister(const Lib& lib, const uint32_t* which, uint32_t n) noexcept;
  void rewatch_locked() noexcept;  // the watched span after entries left: what is still held

  // Whether [lo, hi) overlaps a range sent from recently and not changed since; records it
  // if not. mutex_ held.
  bool seen_before_locked(uintptr_t lo, uintptr_t hi) noexcept;

  static constexpr uint32_t kSeen = 64;
  struct Seen {  // written under mutex_, cleared by invalidate() (hi = 0)
    std::atomic<uintptr_t> lo{0}, hi{0};
  };
  Seen seen_[kSeen];          // ranges sent from once, newest overwriting the oldest
  uint32_t seen_next_ = 0;
  Entry entries_[kEntries];
  std::mutex mutex_;
  uint64_t clock_ = 0;       // under mutex_
  size_t bytes_ = 0;         // registered bytes of kLive and kDead entries, under mutex_
  std::atomic<uint64_t> epoch_{0};  // bumped by invalidations while registering_ > 0
  std::atomic<uint32_t> registering_{0};  // acquires with a registration under way
  std::atomic<uint64_t> hits_{0}, registrations_{0}, invalidated_{0};
  std::atomic<bool> told_uncached_{false};
};

}  // namespace fastsock::verbs
