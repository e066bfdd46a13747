// Pooled segments per rendezvous channel (docs/shm-rendezvous.md, "Pooled segments").
//
// A connection's segment (memfd, map, prefault: ~36 us for both ends) costs three TCP
// connections. A channel binds one connector process to one acceptor process, so both ends
// can keep the segments (and both eventfds) of finished connections for the next ones
// between the same two processes: a Pool per channel on each side, up to kPoolSlots slots.
//
// Ownership: a slot is reference-counted, held by its pool and by the Conn using it (the
// Conn borrows the segment and both eventfds). A channel that closes closes its pool: idle
// slots are freed at once, slots in use when their connection ends.
//
// Reuse rule (the connector decides, the acceptor checks):
// - the acceptor's Conn, when it ends, marks the slot released in the segment
//   (SideLine::released of side 1), only in the process that owns the pool;
// - the connector reuses a slot only when its own reference count says no Conn of its uses
//   it AND it sees the acceptor's mark; it then resets the whole layout to what a fresh
//   segment holds (Segment::reset_layout, which clears the mark) before sending the hello;
// - the acceptor accepts a reuse only when its own reference count says the slot is free,
//   else it rejects the connection (it stays on TCP).
// A slot whose ring grew beyond the initial window, or whose connection lived across a
// fork (two processes may hold it), is never reused: it leaves the pool (the acceptor marks
// it retired). Pools belong to the process that made them: a forked child never locks,
// marks or picks from its parent's pools; it only drops its copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "shm_rendezvous_wire.hpp"
#include "shm_segment.hpp"

namespace fastsock::shm {

struct PoolSlot {
  std::atomic<int> refs{1};
  Segment segment;
  int own_bell = -1;   // this side's eventfd
  int peer_bell = -1;  // the peer's (the connector's arrives with the slot's first reply)
  uint16_t id = 0;
  uint64_t fork_era = 0;  // fork_era() when its current connection began
};

// Process-wide counters (tests, benchmarks).
struct PoolCounters {
  std::atomic<uint64_t> fresh{0};     // slots made (and kept) for a connection
  std::atomic<uint64_t> reused{0};    // connections on a slot of an earlier one
  std::atomic<uint64_t> unpooled{0};  // connector: pool full or closed, a segment of its own
  std::atomic<uint64_t> retired{0};   // slots that left a pool before their channel closed
  std::atomic<uint64_t> refused{0};   // acceptor: reuse or fresh slot refused (still in use)
};
PoolCounters& pool_counters() noexcept;

class Pool {
 public:
  // A pool owned by the calling process, with one reference (the channel's). nullptr when
  // out of memory (the channel's connections are then unpooled).
  static Pool* create() noexcept;

  void ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void unref() noexcept;
  // The channel closed: drops the idle slots and the channel's reference.
  void close() noexcept;

  // Connector, before the TCP connect: a released slot (reset, op reuse), else a new one
  // in a free slot (op fresh), else nullptr (op unpooled). The slot comes with a reference
  // for the caller. `status` says why a new segment could not be made (then nullptr).
  struct Pick {
    PoolSlot* slot = nullptr;
    SlotOp op = SlotOp::unpooled;
  };
  Pick pick(const Limits& limits, Status& status) noexcept;
  // Connector: the acceptor did not take this slot (rejected, or no usable answer): it
  // leaves the pool.
  void forget(PoolSlot* slot) noexcept;
  // Connector: the hello that reused this slot was withdrawn (Dialer::withdraw), so the
  // acceptor never took the slot: it is released on its side as before the hello, and the
  // acceptor's mark (cleared when the slot was picked) says so again.
  void withdrawn(PoolSlot* slot) noexcept;

  // Acceptor: the slot `id` for a reuse, with a reference for the caller; nullptr with
  // `why` when there is none or this side still uses it.
  PoolSlot* take_reused(uint16_t id, const char** why) noexcept;
  // Acceptor: keeps a fresh slot (takes the segment and both eventfds, also on failure);
  // the slot comes with a reference for the caller. nullptr with `why` when this side
  // still uses a slot of that id.
  PoolSlot* keep_fresh(uint16_t id, Segment&& segment, int own_bell, int peer_bell,
                       const char** why) noexcept;

  // A connection on `slot` ended on `side` (0 connector, 1 acceptor): see the reuse rule.
  // Drops the connection's reference.
  void release(PoolSlot* slot, int side) noexcept;


 private:
  Pool() = default;
  ~Pool();
  bool mine() const noexcept;
  void drop_locked(int id) noexcept;  // removes slot `id` from the pool (lock held)

  std::atomic<int> refs_{1};
  std::mutex lock_;
  pid_t owner_ = 0;
  bool closed_ = false;
  int next_fresh_ = 0;  // where the search for a free id starts
  PoolSlot* slots_[kPoolSlots] = {};
};

// Drops a reference to a slot (the last one unmaps it and closes its eventfds).
void unref_slot(PoolSlot* slot) noexcept;
// Increases with every fork of this process (pthread_atfork).
uint64_t fork_era() noexcept;

}  // namespace fastsock::shm
