// Pooled segments per rendezvous channel (shm_pool.hpp).
#include "shm_pool.hpp"

#include <pthread.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <new>

#include "internal_fds.hpp"
#include "shm_process.hpp"
#include "shm_sys.hpp"

namespace fastsock::shm {

namespace {

std::atomic<uint64_t> g_fork_era{0};
PoolCounters g_counters;

void next_fork_era() noexcept { g_fork_era.fetch_add(1, std::memory_order_relaxed); }

void register_fork_era() noexcept {
  static const bool registered = pthread_atfork(next_fork_era, nullptr, nullptr) == 0;
  (void)registered;
}

// A ring that grew touched pages beyond its initial window: such a slot is not kept, so
// that an idle pooled slot holds the header and two initial windows only. Any geometry but
// the fresh one (window = previous = initial) counts as grown, garbage included.
bool still_initial(const PoolSlot& s) noexcept {
  const uint32_t initial = s.segment.limits().initial_window;
  const uint64_t fresh = encode_geometry(initial, initial, 0);
  constexpr uint64_t kWindows = (uint64_t{1} << kGeometryCounterShift) - 1;
  const Layout* l = s.segment.layout();
  for (int d = 0; d < 2; ++d)
    if ((l->dir[d].producer.geometry.load(std::memory_order_relaxed) & kWindows) != fresh)
      return false;
  return true;
}

// A signal of the previous connection that nobody consumed (the side's `pending` flag says
// so: a peer writes the eventfd only after setting it) must not wake the next connection's
// first waiter for nothing. Both ends released the slot, so the connector drains both
// eventfds; a flag that lies costs one read, or one spurious wake-up, never a lost signal.
void drain_unconsumed(const PoolSlot& s) noexcept {
  uint64_t n;
  const Layout* l = s.segment.layout();
  if (l->side[0].pending.load(std::memory_order_acquire) != 0)
    (void)sys::read(s.own_bell, &n, sizeof n);
  if (l->side[1].pending.load(std::memory_order_acquire) != 0)
    (void)sys::read(s.peer_bell, &n, sizeof n);
}

std::atomic<uint32_t>& release_mark(const PoolSlot& s) noexcept {
  return s.segment.layout()->side[1].released;
}

}  // namespace

PoolCounters& pool_counters() noexcept { return g_counters; }

uint64_t fork_era() noexcept { return g_fork_era.load(std::memory_order_relaxed); }

void unref_slot(PoolSlot* slot) noexcept {
  if (!slot || slot->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (slot->own_bell >= 0) internal_fds::close(slot->own_bell);
  if (slot->peer_bell >= 0) internal_fds::close(slot->peer_bell);
  delete slot;  // unmaps the segment
}

Pool* Pool::create() noexcept {
  register_fork_era();
  Pool* p = new (std::nothrow) Pool;
  if (p) p->owner_ = current_pid();
  return p;
}

Pool::~Pool() {
  for (PoolSlot*& s : slots_) {
    unref_slot(s);
    s = nullptr;
  }
}

bool Pool::mine() const noexcept { return owner_ == current_pid(); }

void Pool::unref() noexcept {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void Pool::close() noexcept {
  // In a forked child the lock may have been copied held: never take it there. The child
  // drops its copies with its last reference (no other thread of the child knows the pool).
  if (mine()) {
    std::lock_guard guard(lock_);
    closed_ = true;
    for (int id = 0; id < kPoolSlots; ++id) drop_locked(id);
  }
  unref();
}

void Pool::drop_locked(int id) noexcept {
  unref_slot(slots_[id]);
  slots_[id] = nullptr;
}

Pool::Pick Pool::pick(const Limits& limits, Status& status) noexcept {
  status = Status{};
  Pick pick;
  if (!mine()) return pick;
  std::lock_guard guard(lock_);
  if (closed_) return pick;
  int free_id = -1;
  for (int id = 0; id < kPoolSlots; ++id) {
    PoolSlot* s = slots_[id];
    if (!s) {
      if (free_id < 0) free_id = id;
      continue;
    }
    // Our own count first: only the pool holds it, so no connection of ours uses it. The
    // acceptor's mark is its word alone; the acceptor re-checks its own count.
    if (s->refs.load(std::memory_order_acquire) != 1) continue;
    const uint32_t mark = release_mark(*s).load(std::memory_order_acquire);
    if (mark == kSlotInUse) continue;
    if (mark != kSlotReleased || s->peer_bell < 0 || !still_initial(*s) ||
        s->segment.limits().initial_window != limits.initial_window ||
        s->segment.limits().max_window != limits.max_window) {
      drop_locked(id);  // retired, grown, or garbage: never reused
      g_counters.retired.fetch_add(1, std::memory_order_relaxed);
      if (free_id < 0) free_id = id;
      continue;
    }
    drain_unconsumed(*s);
    s->segment.reset_layout();
    s->refs.fetch_add(1, std::memory_order_relaxed);
    s->fork_era = fork_era();
    g_counters.reused.fetch_add(1, std::memory_order_relaxed);
    return Pick{s, SlotOp::reuse};
  }
  // A new slot: round robin over the free ids, so that an id this side just gave up
  // (the acceptor refused it, maybe still using its own slot of that id) comes last.
  for (int k = 0; k < kPoolSlots && free_id >= 0; ++k) {
    const int id = (next_fresh_ + k) % kPoolSlots;
    if (!slots_[id]) {
      free_id = id;
      break;
    }
  }
  if (free_id < 0) {
    g_counters.unpooled.fetch_add(1, std::memory_order_relaxed);
    return pick;
  }
  next_fresh_ = (free_id + 1) % kPoolSlots;
  auto* s = new (std::nothrow) PoolSlot;
  if (!s) {
    g_counters.unpooled.fetch_add(1, std::memory_order_relaxed);
    return pick;
  }
  status = s->segment.create(limits, kPooledSegmentName);
  if (status.ok()) {
    s->own_bell = internal_fds::take(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (s->own_bell < 0) status = Status{errno, "cannot create an eventfd"};
  }
  if (!status.ok()) {
    unref_slot(s);
    return pick;
  }
  s->id = uint16_t(free_id);
  s->refs.store(2, std::memory_order_relaxed);  // the pool's and the caller's
  s->fork_era = fork_era();
  slots_[free_id] = s;
  g_counters.fresh.fetch_add(1, std::memory_order_relaxed);
  return Pick{s, SlotOp::fresh};
}

void Pool::forget(PoolSlot* slot) noexcept {
  if (!slot || !mine()) return;
  std::lock_guard guard(lock_);
  if (!closed_ && slot->id < kPoolSlots && slots_[slot->id] == slot) {
    drop_locked(slot->id);
    g_counters.retired.fetch_add(1, std::memory_order_relaxed);
  }
}

void Pool::withdrawn(PoolSlot* slot) noexcept {
  if (!slot || !mine()) return;
  std::lock_guard guard(lock_);
  if (!closed_ && slot->id < kPoolSlots && slots_[slot->id] == slot)
    release_mark(*slot).store(kSlotReleased, std::memory_order_release);
}

PoolSlot* Pool::take_reused(uint16_t id, const char** why) noexcept {
  if (!mine() || id >= kPoolSlots) {
    *why = "no pooled segment in that slot";
    return nullptr;
  }
  std::lock_guard guard(lock_);
  PoolSlot* s = closed_ ? nullptr : slots_[id];
  if (!s) {
    *why = "no pooled segment in that slot";
    return nullptr;
  }
  // Our own count decides: a connection of ours still on it means the connector is wrong
  // (or lied), and this connection stays on TCP.
  if (s->refs.load(std::memory_order_acquire) != 1) {
    g_counters.refused.fetch_add(1, std::memory_order_relaxed);
    *why = "the acceptor still uses the pooled segment";
    return nullptr;
  }
  s->refs.fetch_add(1, std::memory_order_relaxed);
  s->fork_era = fork_era();
  g_counters.reused.fetch_add(1, std::memory_order_relaxed);
  return s;
}

PoolSlot* Pool::keep_fresh(uint16_t id, Segment&& segment, int own_bell, int peer_bell,
                           const char** why) noexcept {
  auto* s = new (std::nothrow) PoolSlot;
  if (!s) {
    internal_fds::close(own_bell);
    internal_fds::close(peer_bell);
    *why = "out of memory";
    return nullptr;
  }
  s->segment = static_cast<Segment&&>(segment);
  s->own_bell = own_bell;
  s->peer_bell = peer_bell;
  s->id = id;
  s->fork_era = fork_era();
  if (!mine() || id >= kPoolSlots) {
    unref_slot(s);
    *why = "no pool for this channel";
    return nullptr;
  }
  std::lock_guard guard(lock_);
  if (closed_) {
    unref_slot(s);
    *why = "no pool for this channel";
    return nullptr;
  }
  if (PoolSlot* old = slots_[id]) {
    // The connector dropped its slot of that id (it grew, lived across a fork, or was
    // rejected) and made a new one: ours goes, unless a connection of ours still uses it.
    if (old->refs.load(std::memory_order_acquire) != 1) {
      g_counters.refused.fetch_add(1, std::memory_order_relaxed);
      unref_slot(s);
      *why = "the acceptor still uses a pooled segment of that slot";
      return nullptr;
    }
    drop_locked(id);
  }
  s->refs.store(2, std::memory_order_relaxed);
  slots_[id] = s;
  g_counters.fresh.fetch_add(1, std::memory_order_relaxed);
  return s;
}

void Pool::release(PoolSlot* slot, int side) noexcept {
  if (!slot) return;
  if (mine()) {
    std::lock_guard guard(lock_);
    const bool listed = !closed_ && slot->id < kPoolSlots && slots_[slot->id] == slot;
    // A fork since the connection began: another process may still hold the segment.
    const bool keep = listed && slot->fork_era == fork_era() && still_initial(*slot);
    if (keep) {
      // Our count first, under the lock that take_reused() checks it under: once the
      // connector sees the mark, this end's count already says free. (The pool's reference
      // remains, so this is never the last one.)
      slot->refs.fetch_sub(1, std::memory_order_acq_rel);
      // The last store of this end into the segment: from here the connector may reuse it.
      if (side == 1) release_mark(*slot).store(kSlotReleased, std::memory_order_release);
      return;
    }
    if (side == 1) release_mark(*slot).store(kSlotRetired, std::memory_order_release);
    if (listed) {
      drop_locked(slot->id);
      g_counters.retired.fetch_add(1, std::memory_order_relaxed);
    }
  }
  unref_slot(slot);
}

}  // namespace fastsock::shm
