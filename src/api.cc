#include "api.hpp"

#include "fd_table.hpp"

namespace fastsock::api {

const char* transport_of(int fd) noexcept {
  SocketRef s = fd_table::lookup(fd);
  if (!s) return nullptr;
  // Names are string literals (transport_id.hpp): valid after the Socket is gone.
  return transport_name(s->link ? s->link->id() : TransportId::tcp).data();
}

}  // namespace fastsock::api
