#include "shm_rendezvous_name.hpp"

#include <netinet/in.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "endpoint.hpp"
#include "internal_fds.hpp"
#include "real.hpp"

namespace fastsock::shm {

namespace {

constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
constexpr uint8_t kV6Loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

bool is_wildcard(const stats::Endpoint& ep) noexcept {
  static constexpr uint8_t zero[16] = {};
  const size_t n = ep.family == AF_INET ? 4 : 16;
  return memcmp(ep.addr, zero, n) == 0;
}

stats::Endpoint wildcard(uint16_t family, uint16_t port) noexcept {
  stats::Endpoint ep{};
  ep.family = family;
  ep.port = port;
  return ep;
}

}  // namespace

stats::Endpoint canonical_endpoint(const stats::Endpoint& ep) noexcept {
  stats::Endpoint out{};
  out.port = ep.port;
  if (ep.family == AF_INET) {
    out.family = AF_INET;
    memcpy(out.addr, ep.addr, 4);
  } else if (ep.family == AF_INET6) {
    if (memcmp(ep.addr, kV4MappedPrefix, sizeof kV4MappedPrefix) == 0) {
      out.family = AF_INET;
      memcpy(out.addr, ep.addr + 12, 4);
    } else {
      out.family = AF_INET6;
      memcpy(out.addr, ep.addr, 16);
    }
  }
  return out;
}

bool same_endpoint(const stats::Endpoint& a, const stats::Endpoint& b) noexcept {
  const stats::Endpoint ca = canonical_endpoint(a), cb = canonical_endpoint(b);
  return ca.family != 0 && ca.family == cb.family && ca.port == cb.port &&
         memcmp(ca.addr, cb.addr, sizeof ca.addr) == 0;
}

bool is_loopback(const stats::Endpoint& ep) noexcept {
  const stats::Endpoint c = canonical_endpoint(ep);
  if (c.family == AF_INET) return c.addr[0] == 127;
  return c.family == AF_INET6 && memcmp(c.addr, kV6Loopback, 16) == 0;
}

socklen_t record_address(uid_t uid, const stats::Endpoint& local, Stack stack,
                         sockaddr_un& out) noexcept {
  const stats::Endpoint ep = canonical_endpoint(local);
  if (ep.family == 0) return 0;
  char where[64];
  format_endpoint(ep, where, sizeof where);
  const bool v6only = stack == Stack::v6only && ep.family == AF_INET6 && is_wildcard(ep);
  memset(&out, 0, sizeof out);
  out.sun_family = AF_UNIX;
  // sun_path[0] stays 0: an abstract name. The name is not NUL-terminated; its length is
  // part of the address.
  const int n = snprintf(out.sun_path + 1, sizeof out.sun_path - 1, "fastsock/1/%u/%s%s",
                         unsigned(uid), where, v6only ? "/v6only" : "");
  if (n <= 0 || size_t(n) >= sizeof out.sun_path - 1) return 0;
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

int record_candidates(const stats::Endpoint& dst, bool dst_is_local,
                      RecordName (&out)[kMaxRecordCandidates]) noexcept {
  const stats::Endpoint ep = canonical_endpoint(dst);
  if (ep.family == 0) return 0;
  int n = 0;
  out[n++] = {ep, Stack::dual};
  // A non-loopback address may be another host's: only its exact record can be this
  // host's listener, and a wildcard record here says nothing about where the SYN goes,
  // unless the caller proved the address is this host's. A wildcard destination keeps its
  // exact record only.
  if (is_wildcard(ep) || !(is_loopback(ep) || dst_is_local)) return n;
  if (ep.family == AF_INET) {
    out[n++] = {wildcard(AF_INET, ep.port), Stack::dual};
    out[n++] = {wildcard(AF_INET6, ep.port), Stack::dual};
  } else {
    out[n++] = {wildcard(AF_INET6, ep.port), Stack::dual};
    out[n++] = {wildcard(AF_INET6, ep.port), Stack::v6only};
  }
  return n;
}

bool needs_local_proof(const stats::Endpoint& dst) noexcept {
  const stats::Endpoint ep = canonical_endpoint(dst);
  return ep.family != 0 && !is_wildcard(ep) && !is_loopback(ep);
}

bool destination_is_local(const stats::Endpoint& dst, uint32_t scope_id) noexcept {
  const stats::Endpoint ep = canonical_endpoint(dst);
  if (ep.family == 0) return false;
  sockaddr_storage to;
  const socklen_t to_len = sockaddr_from(ep, to);
  if (to_len == 0) return false;
  if (ep.family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&to)->sin6_scope_id = scope_id;
  const int fd = real().socket(ep.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  internal_fds::add(fd);  // out of the application's close loops while it exists
  bool local = false;
  sockaddr_storage from;
  socklen_t from_len = sizeof from;
  if (real().connect(fd, reinterpret_cast<const sockaddr*>(&to), to_len) == 0 &&
      real().getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_len) == 0) {
    const stats::Endpoint src =
        canonical_endpoint(endpoint_from(reinterpret_cast<const sockaddr*>(&from), from_len));
    local = src.family == ep.family && memcmp(src.addr, ep.addr, sizeof ep.addr) == 0;
  }
  internal_fds::close(fd);
  return local;
}

}  // namespace fastsock::shm
