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

}  // namespace fastsock
