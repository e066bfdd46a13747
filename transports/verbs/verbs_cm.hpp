// The connection manager side of the verbs link: one service per process that owns the
// librdmacm event channel, listens next to every listening TCP socket, drives connectors
// through address and route resolution, and matches incoming RDMA connections to the TCP
// connections they belong to.
//
// Why a thread: an RDMA connect request has to be answered whether or not the application
// is inside a socket call at that moment (a server blocked in epoll_wait on other sockets
// must not stall a connector), and a connector's resolution steps arrive as events. The
// thread sleeps in poll() on the channel; an idle process pays nothing. It starts with the
// first listener or connector of the process that may use verbs.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <mutex>

#include "stats_layout.hpp"
#include "verbs_lib.hpp"
#include "verbs_wire.hpp"

namespace fastsock::verbs {

class Conn;

// What the service tells a connection (always under Cm::lock(), on the service thread or
// in the thread that registered it). Implemented by Conn.
class CmClient {
 public:
  // Connector: the route is known; create the queue pair on id->verbs and connect.
  // Acceptor: a connect request for this connection arrived on `id`; accept it.
  // Return 0 or -errno with `why` (the service rejects/destroys then).
  virtual int on_route(rdma_cm_id* id, const char** why) noexcept = 0;
  virtual int on_request(rdma_cm_id* id, const ConnectData& data, const char** why) noexcept = 0;
  virtual void on_established(const void* private_data, uint8_t len) noexcept = 0;
  virtual void on_failed(const char* why) noexcept = 0;  // static string
  virtual void on_disconnected() noexcept = 0;

 protected:
  ~CmClient() = default;
};

// A TCP connection from the acceptor's point of view.
struct TcpKey {
  stats::Endpoint local;  // the listener's address and port
  stats::Endpoint peer;   // the connector's
};

class Cm {
 public:
  // The process's service, started on first use; nullptr with a reason when verbs cannot
  // be used here (no library, no device, no channel).
  static Cm* get(const char** why) noexcept;

  std::mutex& lock() noexcept { return lock_; }

  // A listening socket bound to `local`: listens in the RDMA port space on the same port
  // (a loopback or wildcard address listens on every RDMA device). Returns a handle or
  // nullptr with `why`.
  void* listen(const stats::Endpoint& local, const char** why) noexcept;
  void unlisten(void* handle) noexcept;

  // Connector: starts resolving `dst` (a loopback destination is reached through this
  // host's RDMA address); the client hears the outcome. 0 or -errno with `why`.
  int connect(CmClient* client, const stats::Endpoint& dst, rdma_cm_id** id_out,
              const char** why) noexcept;

  // Acceptor: announces the connection; a request that already arrived for it is handed
  // over at once (client->on_request, in this thread). Under lock().
  void add_acceptor(CmClient* client, const TcpKey& key) noexcept;
  // The connection goes away: no event reaches `client` after this returns. `id` (may be
  // null) is destroyed afterwards by the caller, outside the lock.
  void forget(CmClient* client, rdma_cm_id* id) noexcept;

  const Lib& lib() const noexcept { return *lib_; }

 private:
  explicit Cm(const Lib* lib, rdma_event_channel* channel) : lib_(lib), channel_(channel) {}
  void run() noexcept;
  void dispatch(rdma_cm_event* event) noexcept;
  void on_connect_request(rdma_cm_id* id, const void* data, uint8_t len) noexcept;
  void expire_parked() noexcept;

  const Lib* lib_;
  rdma_event_channel* channel_;
  std::mutex lock_;
};

}  // namespace fastsock::verbs
