#include "transport.hpp"

#include "fastsock_build_config.h"

namespace fastsock {

// Registration functions live next to each transport (transports/<x>/, shm/).
const TransportEntry& tcp_transport_entry() noexcept;
const TransportEntry& shm_transport_entry() noexcept;
#if FASTSOCK_HAVE_VERBS_LIBS
const TransportEntry& verbs_transport_entry() noexcept;
#endif
#if FASTSOCK_HAVE_VENDOR
const TransportEntry& vendor_transport_entry() noexcept;
#endif

const TransportEntry* find_transport(TransportId id) noexcept {
  switch (id) {
    case TransportId::tcp: return &tcp_transport_entry();
    case TransportId::shm: return &shm_transport_entry();
    case TransportId::verbs:
#if FASTSOCK_HAVE_VERBS_LIBS
      return &verbs_transport_entry();
#else
      return nullptr;
#endif
    case TransportId::vendor:
#if FASTSOCK_HAVE_VENDOR
      return &vendor_transport_entry();
#else
      return nullptr;
#endif
  }
  return nullptr;
}

const char* missing_transport_reason(TransportId id) noexcept {
  switch (id) {
    case TransportId::shm: return "";  // always built
    case TransportId::verbs:
      return "not in this build (built without libibverbs-dev/librdmacm-dev)";
    case TransportId::vendor:
      return "not in this build (configured with -Dvendor=disabled)";
    case TransportId::tcp: return "";
  }
  return "";
}

}  // namespace fastsock
