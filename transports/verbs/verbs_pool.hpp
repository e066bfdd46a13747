// The receive side shared by every connection of this process on one RDMA device: a
// shared receive queue (SRQ) and its registered slots, in the protection domain all those
// connections use (docs/verbs.md, "Memory").
//
// Why: with a receive queue of its own, each connection kept 24 slots of 16 KiB posted and
// registered (384 KiB) whether it received anything or not; a thousand idle connections
// pinned 384 MiB. With the pool, slots go where messages arrive: it starts with one chunk
// of slots and grows by chunks, up to a cap, only while the posted slots run low.
//
// A slot is either posted in the SRQ or held by one connection (a message it received:
// control messages are handled and the slot reposted at once; data stays until the
// application consumes it, within the sender's credits). The credits are unchanged: they
// bound what a sender may have unconsumed per connection, not what the pool holds. So held
// slots must never starve the pool — a connection whose application reads nothing would
// stall every other connection on the device (its senders retry receiver-not-ready
// forever). Two things prevent it:
//   - while the posted slots are below the low mark and the pool cannot grow, a connection
//     copies what it receives out of the pool into memory of its own and reposts at once;
//   - below the low mark the SRQ raises its limit event, and the service thread makes
//     every connection on the pool take its completions and copy out what it holds (a
//     connection nobody polls holds its slots in its completion queue).
// So the pool keeps slots posted whatever the applications do.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "verbs_lib.hpp"

namespace fastsock::verbs {

class RecvPool {
 public:
  static constexpr uint32_t kChunkSlots = 32;
  static constexpr uint32_t kMaxChunks = 16;  // 512 slots: 8 MiB of 16 KiB slots
  // Below this many posted slots the pool grows, or (at its cap) arrivals are copied out.
  static constexpr uint32_t kLowMark = 8;

  // Allocates the protection domain, the SRQ and the first chunk on `context`. nullptr
  // with `why` (a static string) on failure.
  static RecvPool* create(const Lib& lib, ibv_context* context, uint32_t slot_bytes,
                          const char** why) noexcept;
  // Every queue pair on the SRQ is destroyed (the SRQ cannot go before them).
  void destroy() noexcept;

  ibv_pd* pd() const noexcept { return pd_; }
  ibv_srq* srq() const noexcept { return srq_; }
  uint32_t slot_bytes() const noexcept { return slot_bytes_; }
  // A receive completion's slot (its wr_id): false for a value that is not one of ours.
  bool valid(uint32_t slot) const noexcept {
    return slot < chunk_count_.load(std::memory_order_acquire) * kChunkSlots;
  }
  uint8_t* data(uint32_t slot) const noexcept {
    return chunks_[slot / kChunkSlots] + size_t(slot % kChunkSlots) * slot_bytes_;
  }
  // A receive completion took `slot` off the SRQ.
  void taken() noexcept { posted_.fetch_sub(1, std::memory_order_relaxed); }
  // Gives `slot` back to the SRQ. 0 or an errno value.
  int repost(uint32_t slot) noexcept;
  // Few slots posted: grows by a chunk if it may; true while it stays low (at its cap, or
  // registration failed): then arrivals are to be copied out.
  bool low() noexcept;
  // Re-arms the SRQ's limit event (one-shot), after the service handled one.
  void arm_limit() noexcept;
  uint32_t capacity() const noexcept { return chunk_count_.load(std::memory_order_acquire) * kChunkSlots; }
  uint32_t posted() const noexcept { return posted_.load(std::memory_order_relaxed); }

 private:
  RecvPool(const Lib& lib, uint32_t slot_bytes) noexcept : lib_(lib), slot_bytes_(slot_bytes) {}
  int add_chunk() noexcept;  // under grow_lock_; 0 or -errno
  void tell_cap() noexcept;  // under grow_lock_: logs reaching the cap once

  const Lib& lib_;
  const uint32_t slot_bytes_;
  ibv_pd* pd_ = nullptr;
  ibv_srq* srq_ = nullptr;
  std::mutex grow_lock_;
  std::atomic<uint32_t> chunk_count_{0};
  std::atomic<uint32_t> posted_{0};
  bool grow_failed_ = false;  // under grow_lock_: registration refused (memlock limit)
  bool cap_told_ = false;     // under grow_lock_: logged reaching the cap
  uint8_t* chunks_[kMaxChunks] = {};
  ibv_mr* mrs_[kMaxChunks] = {};
};

}  // namespace fastsock::verbs
