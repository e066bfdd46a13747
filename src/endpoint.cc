#include "endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>

namespace fastsock {

stats::Endpoint endpoint_from(const sockaddr* sa, socklen_t len) noexcept {
  stats::Endpoint ep{};
  if (!sa || len < socklen_t(sizeof(sa_family_t))) return ep;
  if (sa->sa_family == AF_INET && len >= socklen_t(sizeof(sockaddr_in))) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ep.family = AF_INET;
    ep.port = ntohs(in->sin_port);
    memcpy(ep.addr, &in->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6 && len >= socklen_t(sizeof(sockaddr_in6))) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ep.family = AF_INET6;
    ep.port = ntohs(in6->sin6_port);
    memcpy(ep.addr, &in6->sin6_addr, 16);
  }
  return ep;
}

socklen_t sockaddr_from(const stats::Endpoint& ep, sockaddr_storage& out) noexcept {
  memset(&out, 0, sizeof out);
  if (ep.family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&out);
    in->sin_family = AF_INET;
    in->sin_port = htons(ep.port);
    memcpy(&in->sin_addr, ep.addr, 4);
    return sizeof(sockaddr_in);
  }
  if (ep.family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(ep.port);
    memcpy(&in6->sin6_addr, ep.addr, 16);
    return sizeof(sockaddr_in6);
  }
  return 0;
}

void format_endpoint(const stats::Endpoint& ep, char* out, size_t out_len) noexcept {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (ep.family == AF_INET || ep.family == AF_INET6) {
    if (!inet_ntop(ep.family, ep.addr, ip, sizeof ip)) snprintf(ip, sizeof ip, "?");
  }
  if (ep.family == AF_INET6)
    snprintf(out, out_len, "[%s]:%u", ip, unsigned(ep.port));
  else if (ep.family == AF_INET)
    snprintf(out, out_len, "%s:%u", ip, unsigned(ep.port));
  else
    snprintf(out, out_len, "?");
}

stats::Endpoint canonical_endpoint(const stats::Endpoint& ep) noexcept {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (ep.family != AF_INET6 || memcmp(ep.addr, kMapped, 12) != 0) return ep;
  stats::Endpoint v4{};
  v4.family = AF_INET;
  v4.port = ep.port;
  memcpy(v4.addr, ep.addr + 12, 4);
  return v4;
}

bool same_endpoint(const stats::Endpoint& a, const stats::Endpoint& b) noexcept {
  const stats::Endpoint x = canonical_endpoint(a), y = canonical_endpoint(b);
  const size_t n = x.family == AF_INET ? 4 : 16;
  return x.family == y.family && x.port == y.port && memcmp(x.addr, y.addr, n) == 0;
}

}  // namespace fastsock
