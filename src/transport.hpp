// The transport interface and its registry (design §2).
//
// A transport is one object behind this interface, registered as an entry
// {id, name, rank, probe, instance}. The core walks the configured failover chain and asks
// each registered transport, in order, to take a connection; kernel TCP is the last link
// and always accepts. Nothing outside transports/<x>/ or shm/ names a concrete transport.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

#include "transport_id.hpp"

namespace fastsock {

struct Socket;

// Whether a transport can be used on this host at all, and if not, why (one sentence).
struct Probe {
  bool available = false;
  char reason[96] = {};
};

// The side of the connection the core is asking about.
enum class Side : uint8_t { client, server };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportId id() const noexcept = 0;

  // Called after a successful listen(): a transport may publish a rendezvous record or
  // listen on its own fabric. Returns 0 or -errno; failure only means no upgrades.
  virtual int on_listen(Socket& s) noexcept = 0;

  // Called once the kernel connection exists (after connect() or accept()). Returns 0 when
  // this transport now carries the connection; otherwise writes why into `why` (one short
  // clause) and returns -errno, and the core tries the next link.
  virtual int attach(Socket& s, Side side, char* why, size_t why_len) noexcept = 0;

  // True when the kernel socket itself carries the data: the core then calls the real libc
  // entry point the application called, unchanged, so every flag keeps the kernel's meaning.
  virtual bool kernel_carries_data() const noexcept = 0;

  // Byte ranges, for transports that carry data themselves (and for resending on a
  // downgrade). `fd` is the application's descriptor the call came through. Return bytes
  // moved or -errno.
  virtual ssize_t send(Socket& s, int fd, const struct iovec* iov, int iovcnt,
                       int flags) noexcept = 0;
  virtual ssize_t recv(Socket& s, int fd, const struct iovec* iov, int iovcnt,
                       int flags) noexcept = 0;

  // The fd that becomes readable/writable when this transport has events for `s`.
  virtual int readiness_fd(const Socket& s, int fd) const noexcept = 0;

  virtual int shutdown(Socket& s, int fd, int how) noexcept = 0;
  // The last descriptor of the connection is closing: release per-connection resources.
  virtual void detach(Socket& s) noexcept = 0;
};

struct TransportEntry {
  TransportId id;
  int rank;                       // lower is preferred when chains are ordered by rank
  Probe (*probe)() noexcept;      // cheap; may be called by `fastsock info` and once per process
  Transport& (*instance)() noexcept;
};

// The registered entry for `id`, or nullptr when this build does not include it.
const TransportEntry* find_transport(TransportId id) noexcept;

// Why a transport that is not registered is missing, for `fastsock info` and stats.
const char* missing_transport_reason(TransportId id) noexcept;

}  // namespace fastsock
