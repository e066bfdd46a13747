#include "fd_table.hpp"

#include <sched.h>
#include <sys/mman.h>

#include <mutex>
#include <new>

#include "process.hpp"

namespace fastsock {

namespace {

using fd_table::detail::Entry;
using fd_table::detail::g_chunks;
// Sockets taken from the pool and not yet given back. Written only under the pool lock
// (plain load and store: no second locked instruction per socket), read anywhere.
std::atomic<size_t> g_live{0};

// The Socket pool. Allocation happens on socket()/accept(), never on the data path, and
// holds the lock for a few instructions: a spinlock, half the cost of a mutex per
// connection. A waiter yields rather than burn its time slice if the holder was preempted.
class PoolLock {
 public:
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed)) sched_yield();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};
PoolLock g_pool_mutex;
Socket* g_free_list = nullptr;
constexpr size_t kPoolBlock = 64;

void* map_zeroed(size_t bytes) noexcept {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

Socket* pool_take() noexcept {
  std::lock_guard lock(g_pool_mutex);
  if (!g_free_list) {
    auto* block = static_cast<Socket*>(map_zeroed(sizeof(Socket) * kPoolBlock));
    if (!block) return nullptr;
    for (size_t i = 0; i < kPoolBlock; ++i) {
      Socket* s = new (&block[i]) Socket();
      s->next_free = g_free_list;
      g_free_list = s;
    }
  }
  Socket* s = g_free_list;
  g_free_list = s->next_free;
  g_live.store(g_live.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return s;
}

void pool_give(Socket* s) noexcept {
  std::lock_guard lock(g_pool_mutex);
  s->next_free = g_free_list;
  g_free_list = s;
  g_live.store(g_live.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

// Resets everything but `refs`, which racing lookups may be reading (it is 0 here, and a
// lookup never takes a reference on a Socket whose count is 0).
void reset_fields(Socket& s) noexcept {
  s.domain = 0;
  s.link = nullptr;
  s.user_io.store(false, std::memory_order_relaxed);
  s.reset_reported.store(false, std::memory_order_relaxed);
  s.peer_byte_order.store(0, std::memory_order_relaxed);
  s.zerocopy_state.store(0, std::memory_order_relaxed);
  s.zerocopy_busy.store(false, std::memory_order_relaxed);
  s.zerocopy_next_id = 0;
  s.link_state = nullptr;
  s.mode.reset();
  s.epoll_regs = nullptr;
  for (void*& state : s.listen_state) state = nullptr;
  s.slot = &s.private_slot;
  s.private_slot.state.store(0, std::memory_order_relaxed);
  s.private_slot.fd = -1;
  s.private_slot.role = 0;
  s.private_slot.transport = 0;
  s.private_slot.local = {};
  s.private_slot.peer = {};
  s.private_slot.bytes_sent.store(0, std::memory_order_relaxed);
  s.private_slot.bytes_received.store(0, std::memory_order_relaxed);
  s.private_slot.opened_ns = 0;
  s.private_slot.reason[0] = '\0';
  s.next_free = nullptr;
}

void release(Socket* s) noexcept {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    on_socket_released(*s);
    pool_give(s);
  }
}

// One past the highest chunk ever allocated: walks over the table stop there.
std::atomic<size_t> g_chunk_limit{0};

Entry* entry_for(int fd, bool create) noexcept {
  if (fd < 0 || fd >= fd_table::kMaxFd) return nullptr;
  auto& top = g_chunks[size_t(fd) >> fd_table::kChunkBits];
  Entry* chunk = top.load(std::memory_order_acquire);
  if (!chunk) {
    if (!create) return nullptr;
    auto* fresh = static_cast<Entry*>(map_zeroed(sizeof(Entry) * fd_table::kChunkSize));
    if (!fresh) return nullptr;
    if (top.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
      const size_t limit = (size_t(fd) >> fd_table::kChunkBits) + 1;
      size_t seen = g_chunk_limit.load(std::memory_order_relaxed);
      while (seen < limit && !g_chunk_limit.compare_exchange_weak(seen, limit)) {}
    } else {
      munmap(fresh, sizeof(Entry) * fd_table::kChunkSize);  // another thread won the race
    }
  }
  return &chunk[fd & (fd_table::kChunkSize - 1)];
}

void lock_pool_for_fork() noexcept { g_pool_mutex.lock(); }
void unlock_pool_after_fork() noexcept { g_pool_mutex.unlock(); }
const ForkHandlers g_fork_handlers{lock_pool_for_fork, unlock_pool_after_fork,
                                   unlock_pool_after_fork};
const bool g_registered = (register_fork_handlers(g_fork_handlers), true);

}  // namespace

// Zero-initialised .bss: pages are only touched for chunks that exist.
std::atomic<Entry*> fd_table::detail::g_chunks[size_t(fd_table::kMaxFd) >> fd_table::kChunkBits];

void SocketRef::reset() noexcept {
  if (s_) release(std::exchange(s_, nullptr));
}

namespace fd_table {

SocketRef make_socket() noexcept {
  Socket* s = pool_take();
  if (!s) return {};
  reset_fields(*s);
  s->refs.store(1, std::memory_order_release);
  return SocketRef(s);
}

SocketRef detail::lookup_slow(Entry& entry) noexcept {
  Entry* e = &entry;
  Socket* s = e->load(std::memory_order_acquire);
  if (!s) return {};
  int32_t r = s->refs.load(std::memory_order_relaxed);
  do {
    if (r == 0) return {};  // being recycled: the descriptor was just closed
  } while (!s->refs.compare_exchange_weak(r, r + 1, std::memory_order_acquire,
                                          std::memory_order_relaxed));
  // The pool may have recycled `s` for another descriptor between the load and the
  // increment; the entry still pointing at it proves it is ours.
  if (e->load(std::memory_order_acquire) != s) {
    release(s);
    return {};
  }
  return SocketRef(s);
}

bool install(int fd, Socket* s) noexcept {
  Entry* e = entry_for(fd, s != nullptr);
  if (!e) return s == nullptr;
  if (s) s->refs.fetch_add(1, std::memory_order_relaxed);
  if (Socket* old = e->exchange(s, std::memory_order_acq_rel)) release(old);
  return true;
}

bool install_owned(int fd, SocketRef s) noexcept {
  Entry* e = entry_for(fd, bool(s));
  if (!e) return !s;  // out of range or out of memory: `s` goes, the fd stays untracked
  if (Socket* old = e->exchange(s.leak(), std::memory_order_acq_rel)) release(old);
  return true;
}

void remove_range(unsigned first, unsigned last) noexcept {
  // No chunk beyond the limit was ever allocated. Without this bound a close_range(3, ~0U)
  // (CPython's child before its exec, close loops) read the whole top array, 2 MiB of
  // mostly untouched pages: a page fault per 4 KiB, 7 ms per call after a fork.
  const size_t end = g_chunk_limit.load(std::memory_order_acquire) << kChunkBits;
  if (first >= end) return;
  if (last >= end) last = unsigned(end - 1);
  for (unsigned fd = first; fd <= last;) {
    Entry* chunk = g_chunks[fd >> kChunkBits].load(std::memory_order_acquire);
    unsigned chunk_end = (fd | unsigned(kChunkSize - 1));
    if (chunk_end > last) chunk_end = last;
    if (chunk) {
      for (unsigned i = fd; i <= chunk_end; ++i)
        if (Socket* old = chunk[i & unsigned(kChunkSize - 1)].exchange(nullptr)) release(old);
    }
    if (chunk_end == last) break;
    fd = chunk_end + 1;
  }
}

void for_each_socket(void (*fn)(int fd, Socket& s, void* context), void* context) noexcept {
  // Inherited sockets first (fork or exec may be a process's first hooked call).
  if (!fastsock::detail::g_real_ready.load(std::memory_order_acquire))
    fastsock::detail::resolve_real();
  const size_t limit = g_chunk_limit.load(std::memory_order_acquire);
  for (size_t c = 0; c < limit; ++c) {
    Entry* chunk = g_chunks[c].load(std::memory_order_acquire);
    if (!chunk) continue;
    for (int i = 0; i < kChunkSize; ++i) {
      if (!chunk[i].load(std::memory_order_relaxed)) continue;
      SocketRef s = detail::lookup_slow(chunk[i]);
      if (s) fn(int(c << kChunkBits) + i, *s, context);
    }
  }
}

size_t live_sockets() noexcept { return g_live.load(std::memory_order_relaxed); }

}  // namespace fd_table
}  // namespace fastsock
