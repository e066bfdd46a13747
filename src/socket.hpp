// Per-connection state of a tracked TCP socket.
//
// One Socket per open file description: dup'ed descriptors share it (the fd table holds a
// reference per descriptor). Socket objects live in a type-stable pool and are never
// returned to the system, so a racing lookup can always safely touch one; the reference
// count decides when it is recycled (see fd_table.hpp).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>

#include "socket_mode.hpp"
#include "stats_layout.hpp"
#include "transport.hpp"

namespace fastsock {

struct Socket {
  std::atomic<int32_t> refs{0};
  int domain = 0;                     // AF_INET or AF_INET6
  Transport* link = nullptr;          // the link of the chain carrying the data
  // The link carries the data itself (not the kernel): the data calls go to it. Cached from
  // link->kernel_carries_data() so that the kernel path pays one load, not a virtual call.
  std::atomic<bool> user_io{false};
  // A link reported the connection reset (ECONNRESET) to the application. The kernel gives
  // that error once; after it, sends fail with EPIPE (and SIGPIPE) and reads see the end
  // of the stream (user_io.cc, as_after_reset).
  std::atomic<bool> reset_reported{false};
  // The byte order the peer sends typed arrays in (FASTSOCK_ORDER_*; 0: ours), set through
  // fastsock_set_peer_byte_order (api_array.cc).
  std::atomic<uint8_t> peer_byte_order{0};
  // MSG_ZEROCOPY for typed sends on kernel TCP (api_zerocopy.cc): untried/on/off, the
  // claim serializing zerocopy senders, and the id the kernel gives the next such send.
  std::atomic<uint8_t> zerocopy_state{0};
  std::atomic<bool> zerocopy_busy{false};
  uint32_t zerocopy_next_id = 0;
  void* link_state = nullptr;         // the link's per-connection state, owned by the link
  // O_NONBLOCK and the timeouts, for links that carry the data (see socket_mode.hpp).
  SocketMode mode;
  void* epoll_regs = nullptr;         // its registrations in epoll sets (epoll_merge.cc)
  // A listener: what each link published for it in Transport::on_listen (owned by the link).
  void* listen_state[kTransportCount] = {};
  // Counters and description. Points into the published stats area when a slot was free,
  // else at `private_slot`; writers never need to know which.
  stats::Slot* slot = nullptr;
  stats::Slot private_slot{};
  Socket* next_free = nullptr;        // pool free list
};

}  // namespace fastsock
