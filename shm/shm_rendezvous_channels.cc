// The connector's idle channel cache (shm_rendezvous_channels.hpp).
#include "shm_rendezvous_channels.hpp"

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "internal_fds.hpp"
#include "real.hpp"
#include "shm_pool.hpp"
#include "shm_process.hpp"
#include "shm_rendezvous_name.hpp"

namespace fastsock::shm::channels {

namespace {

struct Idle {
  int fd = -1;
  Pool* pool = nullptr;  // the channel's segment pool (closed with the channel)
  uid_t uid = 0;
  stats::Endpoint dst{};
  uint64_t age = 0;  // when given back: the smallest is the oldest
};

struct Cache {
  std::mutex lock;
  pid_t pid = 0;  // the process whose channels these are
  Idle idle[kMaxIdle];
  // Changed under the lock; read without it by the fast paths of processes that keep no
  // channel (every close() of the application, every dial to a server without fastsock).
  std::atomic<int> count{0};
  uint64_t clock = 0;
};

Cache g_cache;

// A fork copies the cache and its descriptors; the child closes its copies before running
// anything else, so it can neither use its parent's channels nor mistake a reused number
// for one. The lock is held across the fork so that the copy is consistent.
void before_fork() noexcept { g_cache.lock.lock(); }
void after_fork_parent() noexcept { g_cache.lock.unlock(); }
void after_fork_child() noexcept {
  for (Idle& e : g_cache.idle) {
    if (e.fd >= 0) internal_fds::close(e.fd);
    // The parent's pool: the child drops its copies of the idle slots (Pool::close never
    // locks or marks a pool of another process).
    if (e.fd >= 0 && e.pool) e.pool->close();
    e.fd = -1;
    e.pool = nullptr;
  }
  g_cache.count = 0;
  g_cache.pid = 0;
  g_cache.lock.unlock();
}

// dup2/dup3 by the application onto an idle channel's number (internal_fds::replaced).
void forget_replaced(int fd) noexcept { forget_range(unsigned(fd), unsigned(fd)); }

void register_handlers() noexcept {
  static const bool registered =
      (internal_fds::on_replaced(forget_replaced),
       pthread_atfork(before_fork, after_fork_parent, after_fork_child) == 0);
  (void)registered;
}

// The cache belongs to `pid` from now on; entries of another pid (a child made by a raw
// clone, which ran no handler) are forgotten, never closed: their numbers may be reused.
void own(Cache& c, pid_t pid) noexcept {
  if (c.pid == pid) return;
  for (Idle& e : c.idle) {
    e.fd = -1;
    e.pool = nullptr;  // (its copies stay mapped in this process: no handler ran)
  }
  c.count = 0;
  c.pid = pid;
}

void close_pool(Pool* pool) noexcept {
  if (pool) pool->close();
}

}  // namespace

int take(uid_t uid, const stats::Endpoint& dst, pid_t pid, Pool*& pool) noexcept {
  pool = nullptr;
  register_handlers();
  if (g_cache.count.load(std::memory_order_relaxed) == 0) return -1;
  std::lock_guard guard(g_cache.lock);
  own(g_cache, pid);
  if (g_cache.count == 0) return -1;
  // The most recently used first: it is the likeliest to be alive.
  Idle* best = nullptr;
  for (Idle& e : g_cache.idle) {
    if (e.fd < 0 || e.uid != uid || !same_endpoint(e.dst, dst)) continue;
    if (!best || e.age > best->age) best = &e;
  }
  if (!best) return -1;
  const int fd = best->fd;
  pool = best->pool;
  best->fd = -1;
  best->pool = nullptr;
  --g_cache.count;
  return fd;
}

void give_back(uid_t uid, const stats::Endpoint& dst, pid_t pid, int fd, Pool* pool) noexcept {
  if (fd < 0) {
    close_pool(pool);
    return;
  }
  int evicted = -1;
  Pool* evicted_pool = nullptr;
  {
    std::lock_guard guard(g_cache.lock);
    if (pid != current_pid()) {
      // Taken before a fork: the parent's, not this process's to keep (or close: the
      // number is shared with the parent only as a copy, so closing our copy is safe).
      evicted = fd;
      evicted_pool = pool;
    } else {
      own(g_cache, pid);
      Idle* free_slot = nullptr;
      Idle* oldest = nullptr;
      Idle* oldest_same = nullptr;
      int same = 0;
      for (Idle& e : g_cache.idle) {
        if (e.fd < 0) {
          if (!free_slot) free_slot = &e;
          continue;
        }
        if (!oldest || e.age < oldest->age) oldest = &e;
        if (e.uid == uid && same_endpoint(e.dst, dst)) {
          ++same;
          if (!oldest_same || e.age < oldest_same->age) oldest_same = &e;
        }
      }
      Idle* slot = free_slot;
      if (same >= kMaxIdlePerDestination) slot = oldest_same;
      else if (!slot) slot = oldest;
      if (slot->fd >= 0) {
        evicted = slot->fd;
        evicted_pool = slot->pool;
        --g_cache.count;
      }
      *slot = Idle{fd, pool, uid, dst, ++g_cache.clock};
      ++g_cache.count;
    }
  }
  if (evicted >= 0) internal_fds::close(evicted);
  close_pool(evicted_pool);  // outside the cache lock: the cache and pool locks never nest
}

void close_all() noexcept {
  Pool* pools[kMaxIdle] = {};
  {
    std::lock_guard guard(g_cache.lock);
    const bool mine = g_cache.pid == current_pid();
    for (int i = 0; i < kMaxIdle; ++i) {
      Idle& e = g_cache.idle[i];
      if (e.fd >= 0 && mine) {
        internal_fds::close(e.fd);
        pools[i] = e.pool;
      }
      e.fd = -1;
      e.pool = nullptr;
    }
    g_cache.count = 0;
  }
  for (Pool* p : pools) close_pool(p);
}

void forget_range(unsigned first, unsigned last) noexcept {
  if (g_cache.count.load(std::memory_order_relaxed) == 0) return;
  Pool* pools[kMaxIdle] = {};
  {
    std::lock_guard guard(g_cache.lock);
    for (int i = 0; i < kMaxIdle; ++i) {
      Idle& e = g_cache.idle[i];
      if (e.fd < 0 || unsigned(e.fd) < first || unsigned(e.fd) > last) continue;
      pools[i] = e.pool;
      e.fd = -1;
      e.pool = nullptr;
      --g_cache.count;
    }
  }
  for (Pool* p : pools) close_pool(p);
}

int idle_count() noexcept {
  std::lock_guard guard(g_cache.lock);
  return g_cache.pid == current_pid() ? g_cache.count.load() : 0;
}

}  // namespace fastsock::shm::channels
