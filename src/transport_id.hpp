// The names of the links of the failover chain (design §1), in the order of their rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fastsock {

enum class TransportId : uint8_t { shm = 0, verbs = 1, vendor = 2, tcp = 3 };
inline constexpr int kTransportCount = 4;

// A set of transports, one bit per TransportId.
using TransportMask = uint8_t;
inline constexpr TransportMask kAllTransports = (1u << kTransportCount) - 1;
constexpr TransportMask bit(TransportId id) { return TransportMask(1u << unsigned(id)); }

constexpr std::string_view transport_name(TransportId id) {
  switch (id) {
    case TransportId::shm: return "shm";
    case TransportId::verbs: return "verbs";
    case TransportId::vendor: return "vendor";
    case TransportId::tcp: return "tcp";
  }
  return "?";
}

constexpr std::optional<TransportId> transport_from_name(std::string_view name) {
  for (int i = 0; i < kTransportCount; ++i)
    if (transport_name(TransportId(i)) == name) return TransportId(i);
  return std::nullopt;
}

}  // namespace fastsock
