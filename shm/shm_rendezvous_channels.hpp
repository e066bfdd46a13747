// The connector's idle rendezvous channels: SOCK_SEQPACKET connections to listeners'
// records, kept open between handshakes so that a connection costs two messages and the
// reply instead of a Unix connection's life (docs/shm-rendezvous.md, "Channels").
//
// A channel carries one handshake at a time: a Dialer takes an idle channel (or dials a
// new one), and gives it back only once it has read the reply, so replies can never be
// mixed up between threads. Keyed by (effective uid, canonical destination) and owned by
// the process that made them: a forked child closes the copies it inherited (pthread_atfork)
// and never uses them; a child made without atfork handlers sees another pid and forgets
// them without closing. Bounded per destination and in all; the oldest is closed first.
// Internal to the rendezvous.
#pragma once

#include <sys/types.h>

#include "stats_layout.hpp"

#include "shm_rendezvous.hpp"

namespace fastsock::shm::channels {

inline constexpr int kMaxIdlePerDestination = channels_per_destination;
inline constexpr int kMaxIdle = 64;

// An idle channel to the listener `dst` reaches (-1: none), with its segment pool
// (shm_pool.hpp; may be null). The caller owns both until it gives them back or closes them
// (a channel's pool closes with it: Pool::close).
int take(uid_t uid, const stats::Endpoint& dst, pid_t pid, Pool*& pool) noexcept;
// Keeps `fd` and its pool for the next connection to `dst`, made by `pid` (closed instead
// if `pid` is not this process any more, or when the cache is full and it is the oldest).
void give_back(uid_t uid, const stats::Endpoint& dst, pid_t pid, int fd, Pool* pool) noexcept;
// Closes every idle channel of this process (tests; a process that wants none kept).
void close_all() noexcept;
// The application closed (or dup2'ed over) the descriptors [first, last]: idle channels
// among them are forgotten, never used or closed again (the numbers may be reused at once);
// their pools close.
void forget_range(unsigned first, unsigned last) noexcept;
int idle_count() noexcept;

}  // namespace fastsock::shm::channels
