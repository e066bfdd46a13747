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
// endpoint, then the wildcard listeners that would accept the connection (IPv4: 0.0.0.0:P
// and dual-stack [::]:P; IPv6: dual-stack and IPv6-only [::]:P) when `dst` is an address of
// this host: always for a loopback destination, and for any other (non-wildcard) one when
// the caller proved it (`dst_is_local`, see destination_is_local). A wildcard destination
// (0.0.0.0, ::) gets its exact record only. Returns how many were written to `out` (0 for
// an unknown family). Pure: no system call.
struct RecordName {
  stats::Endpoint endpoint;
  Stack stack;
};
inline constexpr int kMaxRecordCandidates = 3;
int record_candidates(const stats::Endpoint& dst, bool dst_is_local,
                      RecordName (&out)[kMaxRecordCandidates]) noexcept;
// Without a proof: wildcard records for loopback destinations only.
inline int record_candidates(const stats::Endpoint& dst,
                             RecordName (&out)[kMaxRecordCandidates]) noexcept {
  return record_candidates(dst, false, out);
}

// Whether wildcard records may serve `dst` only once it is proven to be an address of this
// host: an IPv4/IPv6 destination that is neither loopback nor a wildcard (after
// canonical_endpoint). A wildcard record here says nothing about where a SYN to another
// host goes.
bool needs_local_proof(const stats::Endpoint& dst) noexcept;

// Asks the kernel whether `dst` (its address; the port is ignored) is an address of this
// host in the caller's network namespace: a datagram socket of its family connect()ed to it
// (which sends nothing) gets the address itself as its source only when the route to it is
// a local one. 4 system calls (socket, connect, getsockname, close; libc through real()).
// `scope_id` is the destination's sin6_scope_id (link-local IPv6). false when unsure (any
// failure, an address of this host whose local route names another source).
bool destination_is_local(const stats::Endpoint& dst, uint32_t scope_id) noexcept;

}  // namespace fastsock::shm
