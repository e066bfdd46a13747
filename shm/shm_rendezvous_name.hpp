// Where a listener's rendezvous record lives: abstract Unix socket names derived from
// (uid, address, port), and which names a connector tries for a destination.
//
// Abstract names belong to the network namespace and vanish with the socket, so a record
// never crosses namespaces and never outlives its listener (docs/shm-rendezvous.md).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "stats_layout.hpp"

namespace fastsock::shm {

// The endpoint with an IPv4-mapped IPv6 address turned into plain IPv4, and the unused
// address bytes zeroed: one spelling per endpoint, so names and comparisons agree whatever
// the socket family of either side.
stats::Endpoint canonical_endpoint(const stats::Endpoint& ep) noexcept;

// Equal after canonical_endpoint (family, port and address).
bool same_endpoint(const stats::Endpoint& a, const stats::Endpoint& b) noexcept;

// 127.0.0.0/8 or ::1 (after canonical_endpoint).
bool is_loopback(const stats::Endpoint& ep) noexcept;

// Whether the record of a listener bound to `local` is the dual-stack or the IPv6-only
// kind. Only an IPv6 wildcard listener ([::]) can be either; its two kinds get different
// names because only a dual-stack one accepts IPv4 connections.
enum class Stack : uint8_t { dual, v6only };

// Fills `out` with the abstract name "\0fastsock/1/<uid>/<endpoint>[/v6only]" and returns
// the address length to pass to bind()/connect(), or 0 for an endpoint that is not IPv4 or
// IPv6. `stack` only matters for the IPv6 wildcard.
socklen_t record_address(uid_t uid, const stats::Endpoint& local, Stack stack,
                         sockaddr_un& out) noexcept;

// The records a connector tries for destination `dst`, most specific first: the exact
// endpoint, then, for loopback destinations only, the wildcard listeners that would accept
// the connection (IPv4: 0.0.0.0:P and dual-stack [::]:P; ::1: dual-stack and IPv6-only
// [::]:P). Returns how many were written to `out` (0 for an unknown family).
struct RecordName {
  stats::Endpoint endpoint;
  Stack stack;
};
inline constexpr int kMaxRecordCandidates = 3;
int record_candidates(const stats::Endpoint& dst, RecordName (&out)[kMaxRecordCandidates]) noexcept;

}  // namespace fastsock::shm
