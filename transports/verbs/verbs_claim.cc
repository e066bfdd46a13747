#include "verbs_claim.hpp"

#include <sys/socket.h>

#include <cstring>

#include "endpoint.hpp"

namespace fastsock::verbs {

namespace {

// same_endpoint without the ports; an endpoint of no IP family is nobody's address.
bool same_address(stats::Endpoint a, const stats::Endpoint& b) noexcept {
  const int family = canonical_endpoint(a).family;
  if (family != AF_INET && family != AF_INET6) return false;
  a.port = b.port;
  return same_endpoint(a, b);
}

}  // namespace

bool is_loopback(const stats::Endpoint& raw) noexcept {
  const stats::Endpoint ep = canonical_endpoint(raw);
  if (ep.family == AF_INET) return ep.addr[0] == 127;
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return ep.family == AF_INET6 && memcmp(ep.addr, kLoop6, 16) == 0;
}

bool request_may_claim(const stats::Endpoint& source, const stats::Endpoint& arrived,
                       const stats::Endpoint& claimed_peer) noexcept {
  if (is_loopback(claimed_peer)) return same_address(source, arrived);
  return same_address(source, claimed_peer);
}

}  // namespace fastsock::verbs
