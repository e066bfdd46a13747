// Connect requests for connections a pre-forking server's children accept (docs/verbs.md,
// fork). The RDMA listener is the process's that called listen(): every connect request
// reaches it, and an rdma_cm_id cannot move to another process. So a forked child that
// accepts on the inherited socket listens over RDMA on a port of its own and publishes
// (TCP 4-tuple -> that port) in this table, which the listening process made before it
// forked (shared memory, inherited by every child). The listener's service answers the
// connection's request with a reject whose private data names the port (RedirectData), and
// the connector connects there.
//
// The table is shared only between a process and its forked children (an anonymous shared
// mapping: nobody else can open it), all running the same program and library; entries are
// still checked before use, and a malformed one is never taken.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "stats_layout.hpp"

namespace fastsock::verbs {

struct TcpKey;

class RedirectTable {
 public:
  static constexpr int kEntries = 256;
  // An entry nobody took for this long (the connector does not run fastsock, or gave up)
  // may be overwritten: a connector's request reaches the listener within milliseconds
  // of its TCP connect.
  static constexpr int64_t kStaleNs = 1'000'000'000;

  // A new table in shared memory (nullptr if it cannot be mapped), answered by `owner`'s
  // RDMA listener. Inherited over fork.
  static RedirectTable* create(pid_t owner) noexcept;
  // Unmaps this process's view (children keep theirs).
  static void destroy(RedirectTable* table) noexcept;

  // Child: the connection `key` is to be redirected to `port`. False when every entry is
  // in use and fresh.
  bool publish(const TcpKey& key, uint16_t port, int64_t now_ns) noexcept;
  // Listener: the port published for `key`, the entry freed; 0 when none.
  uint16_t take(const TcpKey& key) noexcept;

  // The process whose RDMA listener answers the requests (Cm::Listener's owner): the one
  // that listened, or the child that took its listener over once it exited
  // (verbs_successor.cc).
  pid_t owner() const noexcept { return owner_.load(std::memory_order_acquire); }
  // Makes `to` the owner if `from` still is; false if another process changed it first
  // (two children that both found the owner gone: one takes the listener over).
  bool pass_owner(pid_t from, pid_t to) noexcept {
    return owner_.compare_exchange_strong(from, to, std::memory_order_acq_rel);
  }

 private:
  // An entry being written or taken by a process killed at that moment stays so: one entry
  // lost until the server restarts.
  enum : uint32_t { kFree = 0, kWriting = 1, kPublished = 2, kTaking = 3 };
  struct alignas(64) Entry {
    std::atomic<uint32_t> state;
    uint16_t port;
    std::atomic<int64_t> published_ns;  // atomic: publish() reads it before its claim
    stats::Endpoint local;
    stats::Endpoint peer;
  };
  static_assert(sizeof(Entry) == 64);
  std::atomic<pid_t> owner_;
  Entry entries_[kEntries];
};

}  // namespace fastsock::verbs
