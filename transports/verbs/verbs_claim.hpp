// Which RDMA connect request may claim an accepted TCP connection (docs/verbs.md,
// "Upgrade"). A request names the connection by its TCP 4-tuple; without a check, anyone
// who can reach this host's RDMA CM port and guesses a connection's 4-tuple (its ephemeral
// port) could take the connection over. The request's source address is what the RDMA CM
// saw, so it must be the connector's TCP address. Pure functions: unit-tested on hosts
// without RDMA (tests/unit/test_verbs_claim.cc).
#pragma once

#include "stats_layout.hpp"

namespace fastsock::verbs {

// 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z).
bool is_loopback(const stats::Endpoint& ep) noexcept;

// May a request that came from `source` and arrived at `arrived` (the RDMA CM's addresses
// of the request: the connector's end, this end; ports ignored) claim the TCP connection
// whose connector is `claimed_peer`?
//   - A connector on TCP loopback dialled this host's own RDMA address (rxe and RDMA
//     devices do not route 127.0.0.1), from that address: source == arrived.
//   - Otherwise the connector dialled the TCP peer address from its own TCP address (one
//     route for both): source == claimed_peer.
// An unknown family never claims anything.
bool request_may_claim(const stats::Endpoint& source, const stats::Endpoint& arrived,
                       const stats::Endpoint& claimed_peer) noexcept;

}  // namespace fastsock::verbs
