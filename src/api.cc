#include "api.hpp"

#include "fd_table.hpp"

namespace fastsock::api {

const char* transport_of(int fd) noexcept {
  SocketRef s = fd_table::lookup(fd);
  if (!s) return nullptr;
  // The link carrying the data now (a connection that fell back or was moved to TCP says
  // tcp), as its stats slot records it; a socket that is not connected yet is on tcp.
  // Names are string literals (transport_id.hpp): valid after the Socket is gone.
  if (s->link) s->link->refresh_report(*s);
  const stats::Slot& slot = *s->slot;
  const uint8_t id = slot.role == uint8_t(stats::Role::none) ? uint8_t(TransportId::tcp)
                                                              : slot.transport;
  return id < kTransportCount ? transport_name(TransportId(id)).data() : "tcp";
}

}  // namespace fastsock::api
