// Conversions between socket addresses and the pointer-free stats::Endpoint.
#pragma once

#include <sys/socket.h>

#include <cstddef>

#include "stats_layout.hpp"

namespace fastsock {

// Fills `out` from a sockaddr_in/sockaddr_in6 of `len` bytes; family 0 if it is neither.
stats::Endpoint endpoint_from(const sockaddr* sa, socklen_t len) noexcept;

// The sockaddr for an endpoint (for rule matching); returns its length, 0 if unknown.
socklen_t sockaddr_from(const stats::Endpoint& ep, sockaddr_storage& out) noexcept;

// "127.0.0.1:80", "[::1]:80", or "?" for an unknown family. Always NUL-terminates.
void format_endpoint(const stats::Endpoint& ep, char* out, size_t out_len) noexcept;

// An IPv4-mapped IPv6 endpoint as the IPv4 one it is (a v6 socket talking to a v4
// listener sees ::ffff:a.b.c.d where the listener sees a.b.c.d); others unchanged.
stats::Endpoint canonical_endpoint(const stats::Endpoint& ep) noexcept;
// Same family, address and port, once both are canonical.
bool same_endpoint(const stats::Endpoint& a, const stats::Endpoint& b) noexcept;

}  // namespace fastsock
