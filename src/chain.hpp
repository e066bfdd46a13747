// The failover chain: which link carries a connection, and why the faster ones do not.
#pragma once

#include <cstddef>

#include "config.hpp"
#include "socket.hpp"

namespace fastsock {

// Walks the configured chain for `s` (whose slot already holds its endpoints), asking
// each allowed, registered, available transport to attach; kernel TCP ends every chain
// and always accepts. Sets s.link and writes the skipped links' reasons into s.slot->reason,
// e.g. "shm: not built; verbs: not in FASTSOCK_TRANSPORTS". For an accepted connection,
// `listener` is the listening socket it came from.
void choose_link(Socket& s, Side side, Socket* listener) noexcept;

// Whether any link but kernel TCP could take a connection in this process (false when the
// configuration and the probes decide "tcp" for every connection alike).
bool links_may_attach() noexcept;

// Before a client's kernel connect to `dst`: lets every link the chain and the rules allow
// for this destination prepare (Transport::prepare_connect). Free when no link can attach.
void prepare_links(Socket& s, const sockaddr* dst, socklen_t len) noexcept;

// The same decision, as a pure function of its inputs, for unit tests: returns the id of
// the link that would be tried first given which transports are registered and available.
// `attach` is called for candidates (tcp is never passed to it; it always accepts).
struct ChainInputs {
  const Config* config;
  const char* program;
  Direction direction;
  const sockaddr* rule_address;                        // peer (client) or local (server)
  bool (*registered)(TransportId) noexcept;
  bool (*attach)(void* context, TransportId, char* why, size_t why_len) noexcept;
  void* context;                                       // passed to attach
};
TransportId walk_chain(const ChainInputs& in, char* reasons, size_t reasons_len) noexcept;

}  // namespace fastsock
