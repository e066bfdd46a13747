#include "verbs_regcache.hpp"

#include <unistd.h>

#include <algorithm>

#include "guard.hpp"
#include "log.hpp"
#include "mem_watch.hpp"
#include "process.hpp"

namespace fastsock::verbs {

namespace {

// Set once by get(); the hooks find no cache before it.
std::atomic<RegCache*> g_cache{nullptr};

uintptr_t page_mask() noexcept {
  static const uintptr_t mask = ~(uintptr_t(sysconf(_SC_PAGESIZE)) - 1);
  return mask;
}

}  // namespace

RegCache& RegCache::get() noexcept {
  // Never destroyed: frees at exit still report to it.
  static RegCache* const cache = [] {
    auto* c = new RegCache();
    g_cache.store(c, std::memory_order_release);
    return c;
  }();
  return *cache;
}

// Registered at load, so that a fork during the first acquire is covered too.
namespace {
void cache_fork_prepare() noexcept {
  if (RegCache* c = g_cache.load(std::memory_order_acquire)) c->fork_prepare();
}
void cache_fork_parent() noexcept {
  if (RegCache* c = g_cache.load(std::memory_order_acquire)) c->fork_parent();
}
void cache_fork_child() noexcept {
  if (RegCache* c = g_cache.load(std::memory_order_acquire)) c->fork_child();
}
const bool g_fork_registered = (register_fork_handlers(ForkHandlers{
                                    cache_fork_prepare, cache_fork_parent, cache_fork_child}),
                                true);
}  // namespace

void RegCache::invalidate(uintptr_t lo, uintptr_t hi) noexcept {
  RegCache* c = g_cache.load(std::memory_order_acquire);
  if (!c) return;
  // The epoch first: an acquire whose registration was under way when the range changed
  // sees it moved, whether or not this scan saw its entry live (acquire()). Only then:
  // the bump is a locked instruction on a line every thread's frees would share.
  if (c->registering_.load(std::memory_order_seq_cst) > 0)
    c->epoch_.fetch_add(1, std::memory_order_seq_cst);
  for (Entry& e : c->entries_) {
    uint32_t s = e.state.load(std::memory_order_seq_cst);
    if (s != kLive) continue;
    if (e.hi.load(std::memory_order_relaxed) <= lo || e.lo.load(std::memory_order_relaxed) >= hi)
      continue;
    if (e.state.compare_exchange_strong(s, kDead, std::memory_order_seq_cst))
      c->invalidated_.fetch_add(1, std::memory_order_relaxed);
  }
  // A range sent from once and now freed is not a buffer the program reuses.
  for (Seen& s : c->seen_)
    if (s.lo.load(std::memory_order_relaxed) < hi && lo < s.hi.load(std::memory_order_relaxed))
      s.hi.store(0, std::memory_order_relaxed);
}

RegCache::Ref RegCache::acquire(const Lib& lib, ibv_pd* pd, const uint8_t* addr, size_t len,
                                const uint8_t* limit) noexcept {
  if (!pd || len == 0) return {};
  const bool caching = mem_watch::frees_watched();
  if (!caching && !told_uncached_.exchange(true, std::memory_order_relaxed))
    LOG_DEBUG("verbs: the registration cache keeps nothing: this process's free() is not the "
              "library's (an allocator in the executable, or preloaded first: AddressSanitizer)");
  mem_watch::watch(&RegCache::invalidate);
  const auto a = reinterpret_cast<uintptr_t>(addr), b = a + len;
  std::unique_lock lock(mutex_);
  if (caching) {
    for (uint32_t i = 0; i < kEntries; ++i) {
      Entry& e = entries_[i];
      if (e.state.load(std::memory_order_seq_cst) != kLive || e.pd != pd) continue;
      if (e.lo.load(std::memory_order_relaxed) > a || e.hi.load(std::memory_order_relaxed) < b)
        continue;
      ++e.refs;
      e.last_use = ++clock_;
      hits_.fetch_add(1, std::memory_order_relaxed);
      return Ref{e.mr, i, e.gen, e.lo.load(std::memory_order_relaxed),
                 e.hi.load(std::memory_order_relaxed)};
    }
  }
  const uintptr_t lo = a & page_mask();
  const uintptr_t end = std::max(b, std::min(reinterpret_cast<uintptr_t>(limit), a + kWindow));
  const uintptr_t hi = (end + ~page_mask()) & page_mask();
  if (!seen_before_locked(lo, hi)) return {};
  uint32_t gone[kEntries];
  if (const uint32_t n = collect_locked(gone, hi - lo); n > 0) {
    lock.unlock();
    deregister(lib, gone, n);
    lock.lock();
  }
  uint32_t index = kEntries;
  for (uint32_t i = 0; i < kEntries && index == kEntries; ++i)
    if (entries_[i].state.load(std::memory_order_relaxed) == kEmpty) index = i;
  if (index == kEntries) return {};  // every entry held by a send under way: copy
  Entry& e = entries_[index];
  e.state.store(kBusy, std::memory_order_seq_cst);
  e.lo.store(lo, std::memory_order_relaxed);
  e.hi.store(hi, std::memory_order_relaxed);
  bytes_ += hi - lo;
  mem_watch::widen(lo, hi);
  registering_.fetch_add(1, std::memory_order_seq_cst);  // before the epoch is read
  const uint64_t epoch = epoch_.load(std::memory_order_seq_cst);
  lock.unlock();
  ibv_mr* mr;
  {
    ReentryGuard guard;
    // LOCAL_WRITE: the pages are pinned writable, so a page shared copy-on-write (after a
    // fork) is copied now, not after the registration took the shared one.
    mr = (lib.ibv_reg_mr)(pd, reinterpret_cast<void*>(lo), hi - lo, IBV_ACCESS_LOCAL_WRITE);
  }
  lock.lock();
  if (!mr) {
    registering_.fetch_sub(1, std::memory_order_seq_cst);
    bytes_ -= hi - lo;
    e.state.store(kEmpty, std::memory_order_seq_cst);
    rewatch_locked();
    return {};
  }
  e.pd = pd;
  e.mr = mr;
  e.refs = 1;
  ++e.gen;
  e.last_use = ++clock_;
  e.state.store(caching ? kLive : kDead, std::memory_order_seq_cst);
  // A range that changed while it was being registered may have had other pages pinned:
  // good for this send only (its caller's bytes did not change under it), not to keep.
  // An invalidation after this load sees the entry live; one before it bumped the epoch,
  // since registering_ still counts this acquire.
  if (epoch_.load(std::memory_order_seq_cst) != epoch) {
    uint32_t live = kLive;
    (void)e.state.compare_exchange_strong(live, kDead, std::memory_order_seq_cst);
  }
  registering_.fetch_sub(1, std::memory_order_seq_cst);
  registrations_.fetch_add(1, std::memory_order_relaxed);
  return Ref{mr, index, e.gen, lo, hi};
}

bool RegCache::seen_before_locked(uintptr_t lo, uintptr_t hi) noexcept {
  for (const Seen& s : seen_)
    if (s.lo.load(std::memory_order_relaxed) < hi && lo < s.hi.load(std::memory_order_relaxed))
      return true;
  Seen& s = seen_[seen_next_];
  s.hi.store(0, std::memory_order_relaxed);
  s.lo.store(lo, std::memory_order_relaxed);
  s.hi.store(hi, std::memory_order_relaxed);
  seen_next_ = (seen_next_ + 1) % kSeen;
  mem_watch::widen(lo, hi);  // so that a free of it clears the record
  return false;
}

bool RegCache::retain(Ref ref) noexcept {
  if (!ref.mr || ref.index >= kEntries) return false;
  std::lock_guard lock(mutex_);
  Entry& e = entries_[ref.index];
  if (e.gen != ref.gen || e.mr != ref.mr || e.refs == 0) return false;
  ++e.refs;
  return true;
}

void RegCache::release(const Lib& lib, Ref ref) noexcept {
  if (!ref.mr || ref.index >= kEntries) return;
  std::unique_lock lock(mutex_);
  Entry& e = entries_[ref.index];
  if (e.gen != ref.gen || e.mr != ref.mr || e.refs == 0) return;  // dropped meanwhile
  if (--e.refs > 0) return;
  uint32_t dead = kDead;
  if (!e.state.compare_exchange_strong(dead, kBusy, std::memory_order_seq_cst)) return;
  lock.unlock();
  deregister(lib, &ref.index, 1);
}

uint32_t RegCache::collect_locked(uint32_t* out, size_t adding) noexcept {
  uint32_t n = 0;
  size_t keeping = bytes_;
  bool empty_left = false;
  for (uint32_t i = 0; i < kEntries; ++i) {
    Entry& e = entries_[i];
    uint32_t s = e.state.load(std::memory_order_seq_cst);
    if (s == kEmpty) empty_left = true;
    if (s != kDead || e.refs > 0) continue;
    if (e.state.compare_exchange_strong(s, kBusy, std::memory_order_seq_cst)) {
      out[n++] = i;
      keeping -= e.hi.load(std::memory_order_relaxed) - e.lo.load(std::memory_order_relaxed);
    }
  }
  // Room for the new registration: evict the least recently used unheld live entries.
  while ((keeping + adding > kMaxBytes && keeping > 0) || (!empty_left && n == 0)) {
    uint32_t lru = kEntries;
    for (uint32_t i = 0; i < kEntries; ++i) {
      const Entry& e = entries_[i];
      if (e.refs > 0 || e.state.load(std::memory_order_seq_cst) != kLive) continue;
      if (lru == kEntries || e.last_use < entries_[lru].last_use) lru = i;
    }
    if (lru == kEntries) break;
    Entry& e = entries_[lru];
    uint32_t s = kLive;
    if (!e.state.compare_exchange_strong(s, kBusy, std::memory_order_seq_cst)) {
      // Invalidated just now: dead and unheld, so it goes too.
      s = kDead;
      if (!e.state.compare_exchange_strong(s, kBusy, std::memory_order_seq_cst)) continue;
    }
    out[n++] = lru;
    keeping -= e.hi.load(std::memory_order_relaxed) - e.lo.load(std::memory_order_relaxed);
  }
  return n;
}

void RegCache::deregister(const Lib& lib, const uint32_t* which, uint32_t n) noexcept {
  for (uint32_t k = 0; k < n; ++k) {
    Entry& e = entries_[which[k]];  // kBusy: nobody else touches it
    if (e.mr) {
      ReentryGuard guard;
      (void)lib.ibv_dereg_mr(e.mr);
    }
  }
  std::lock_guard lock(mutex_);
  for (uint32_t k = 0; k < n; ++k) {
    Entry& e = entries_[which[k]];
    bytes_ -= e.hi.load(std::memory_order_relaxed) - e.lo.load(std::memory_order_relaxed);
    e.mr = nullptr;
    e.pd = nullptr;
    e.refs = 0;
    e.state.store(kEmpty, std::memory_order_seq_cst);
  }
  rewatch_locked();
}

void RegCache::drop_pd(const Lib& lib, ibv_pd* pd) noexcept {
  uint32_t gone[kEntries];
  uint32_t n = 0;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t i = 0; i < kEntries; ++i) {
      Entry& e = entries_[i];
      uint32_t s = e.state.load(std::memory_order_seq_cst);
      if (e.pd != pd || (s != kLive && s != kDead)) continue;
      if (!e.state.compare_exchange_strong(s, kBusy, std::memory_order_seq_cst)) {
        s = kDead;  // invalidated just now
        if (!e.state.compare_exchange_strong(s, kBusy, std::memory_order_seq_cst)) continue;
      }
      ++e.gen;  // a send's reference to it no longer matches
      gone[n++] = i;
    }
  }
  if (n > 0) deregister(lib, gone, n);
}

void RegCache::fork_child() noexcept {
  for (Entry& e : entries_) {
    e.state.store(kEmpty, std::memory_order_relaxed);
    e.mr = nullptr;
    e.pd = nullptr;
    e.refs = 0;
    ++e.gen;
  }
  for (Seen& s : seen_) s.hi.store(0, std::memory_order_relaxed);
  registering_.store(0, std::memory_order_relaxed);  // the parent's threads are not here
  bytes_ = 0;
  mem_watch::narrow(0, 0);
  mutex_.unlock();
}

void RegCache::rewatch_locked() noexcept {
  // The span the hooks check shrinks to what is still cached or remembered: a program's frees
  // outside it cost no scan. Records cleared since (by invalidate) only make it larger.
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  auto cover = [&](uintptr_t a, uintptr_t b) {
    if (a >= b) return;
    lo = std::min(lo, a);
    hi = std::max(hi, b);
  };
  for (const Entry& e : entries_)
    if (e.state.load(std::memory_order_seq_cst) != kEmpty)
      cover(e.lo.load(std::memory_order_relaxed), e.hi.load(std::memory_order_relaxed));
  for (const Seen& s : seen_)
    cover(s.lo.load(std::memory_order_relaxed), s.hi.load(std::memory_order_relaxed));
  mem_watch::narrow(lo, hi);
}

RegCache::Counters RegCache::counters() const noexcept {
  return {hits_.load(std::memory_order_relaxed), registrations_.load(std::memory_order_relaxed),
          invalidated_.load(std::memory_order_relaxed)};
}

}  // namespace fastsock::verbs
