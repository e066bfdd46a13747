// The vendor link's per-profile service: one thread per vendor library a process uses,
// which listens next to every listening TCP socket, makes connectors' vendor connections,
// matches incoming ones to the accepted TCP connections they belong to, and (for a
// library whose readiness is only seen through its own poll) watches the vendor
// descriptors that application threads wait on.
//
// Why a thread: a connector's Hello must be answered whether or not the application is
// inside a socket call (a server blocked in epoll_wait on other sockets must not stall a
// connector), before or after the application's accept(); and a library like rsocket has
// no kernel descriptor to sleep on. The thread sleeps in the library's poll (the kernel's,
// for readiness=fd) with no timeout while nothing expires: an idle process pays nothing.
// It starts with the first listener or connection that may use the profile.
//
// Locking: the service's lock is taken before a client's own locks, never after.
#pragma once

#include <poll.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "stats_layout.hpp"
#include "vendor_lib.hpp"
#include "vendor_wire.hpp"

namespace fastsock::vendors {

// A TCP connection from the acceptor's point of view.
struct TcpKey {
  stats::Endpoint local;  // the listener's address and port
  stats::Endpoint peer;   // the connector's
};

// What the service tells a connection, always under the service's lock. Implemented by
// vendors::Conn.
class ServiceClient {
 public:
  // The handshake is done: `vfd` (the library's descriptor) carries the link now; the
  // client owns it from here (it gives it back through Service::forget).
  virtual void on_linked(int profile, int vfd) noexcept = 0;
  // This profile could not link the connection (static text, library errno or 0);
  // `retrying`: a connector goes on with the next profile.
  virtual void on_link_failed(int profile, const char* why, int err, bool retrying) noexcept = 0;
  // An armed descriptor is ready (readiness=poll).
  virtual void on_ready() noexcept = 0;

 protected:
  ~ServiceClient() = default;
};

class Service {
 public:
  // The effective profiles of this process (user profiles, then the built-ins).
  static size_t profile_count() noexcept;
  static const Profile& profile(size_t index) noexcept;
  // Whether profile `index` can carry connections here (vendor_probe.hpp), probed once per
  // process; `why` says why not (static text).
  static bool usable(size_t index, const char** why) noexcept;
  // Profile `index`'s service, its thread running; nullptr with `why` when the profile is
  // unusable or the thread cannot start.
  static Service* get(size_t index, const char** why) noexcept;
  // Profile `index`'s service if it runs in this process, else nullptr.
  static Service* running(size_t index) noexcept;

  const Api& api() const noexcept { return lib_->api; }
  const Profile& profile() const noexcept { return profile(index_); }
  bool poll_readiness() const noexcept { return profile().readiness == Readiness::vendor_poll; }

  // Listens through the library on the translated `local` address. A handle, or nullptr
  // with the reason in `why`.
  void* listen(const stats::Endpoint& local, char* why, size_t why_len) noexcept;
  // The application closed the listening socket: the library's listener stays open while
  // connections it accepted still wait for their Hello (at most the handshake time).
  static void unlisten(void* handle) noexcept;
  // The listener was opened by this process (not inherited over fork): only then do the
  // Hellos for its accepted connections reach this process.
  static bool listens_here(const void* handle) noexcept;

  // Connector: connects through the library to `dst` and sends the Hello, in the service
  // thread; the client hears on_linked or on_link_failed.
  void start_connector(ServiceClient* client, const stats::Endpoint& dst, const TcpKey& key,
                       uint64_t nonce) noexcept;
  // Acceptor: a Hello for `key` that came (or comes within a few seconds) is accepted.
  void add_acceptor(ServiceClient* client, const TcpKey& key) noexcept;
  // Readiness=poll: wakes the client (on_ready) once `vfd` has one of `events`.
  void arm(ServiceClient* client, int vfd, short events) noexcept;
  // Shuts `vfd` down through the library (SHUT_WR or SHUT_RDWR). Readiness=poll: in the
  // service thread, the one thread that ever waits inside the library: rsocket's rshutdown
  // blocks reading the completion events that the thread's rpoll also reads, and one of
  // the two slept for ever when the other took the event (the epoll echo pair hung in the
  // VM). `wait`: returns once it is done, or once it ran for a second in the thread, or
  // after ten seconds queued behind the thread's other work without starting (a slow close
  // of another connection: the time it waits behind it is not the library's shutdown being
  // slow);
  // the peer's receiver allows TCP's end to come first for a while (vendor_conn.cc,
  // kEofGraceNs). True when it is done (or not waited for). Nothing in a forked child:
  // the descriptor is the parent's.
  bool shutdown(int vfd, int how, bool wait) noexcept;
  // The client goes away: nothing reaches it after this returns. `vfd` (or -1) is closed
  // by the service thread, which may be polling it.
  void forget(ServiceClient* client, int vfd) noexcept;

  static void fork_prepare() noexcept;
  static void fork_parent() noexcept;
  static void fork_child() noexcept;

 private:
  Service(size_t index, const Lib* lib, int bell, int tick) noexcept
      : index_(index), lib_(lib), bell_(bell), tick_(tick) {}
  void run() noexcept;
  void ring() noexcept;
  int vendor_poll(pollfd* fds, nfds_t n, int timeout_ms) noexcept;
  // Every library descriptor is non-blocking where the library has fcntl: the link asks
  // with MSG_DONTWAIT anyway, and a blocking rsocket's completion channel is blocking too,
  // so its rpoll could block reading an event another caller took.
  void set_nonblocking(int vfd) noexcept;
  // Thread, under lock_: the work each kind of descriptor asks for.
  void send_hello(ServiceClient* client, int fd, const stats::Endpoint& dst, const TcpKey& key,
                  uint64_t nonce) noexcept;
  void accept_from(int listen_fd) noexcept;
  void read_hello(size_t pending_index) noexcept;
  void read_reply(size_t connector_index) noexcept;
  void match() noexcept;
  void expire() noexcept;
  bool send_all(int vfd, const void* data, size_t len) noexcept;
  void reply(int vfd, const wire::Hello& hello, wire::Verdict verdict) noexcept;
  // Hands a failed connector to the next profile that may carry it, or tells it.
  void connector_failed(ServiceClient* client, const stats::Endpoint& dst, const TcpKey& key,
                        uint64_t nonce, const char* why, int err) noexcept;

  struct Listener {
    Service* service;
    int fd;
    pid_t owner;
    int64_t closed_ns = 0;  // the application closed it: lingers for accepted connections
  };
  struct ToConnect {
    ServiceClient* client;
    stats::Endpoint dst;
    TcpKey key;
    uint64_t nonce;
  };
  struct Connector {  // Hello sent, reading the Reply
    ServiceClient* client;
    int fd;
    stats::Endpoint dst;
    TcpKey key;
    uint64_t nonce;
    uint8_t reply[sizeof(wire::Reply)];
    uint8_t got;
    int64_t since_ns;
  };
  struct Pending {  // accepted through the library, reading the Hello
    int fd;
    uint8_t hello[sizeof(wire::Hello)];
    uint8_t got;
    int64_t since_ns;
  };
  struct Waiting {  // an accepted TCP connection whose Hello has not come
    ServiceClient* client;
    TcpKey key;
    int64_t since_ns;
  };
  struct Armed {
    ServiceClient* client;
    int fd;
    short events;
  };
  struct ToShutdown {
    int fd;
    int how;
    uint64_t ticket;  // shutdowns_done_ reaches it once done
  };

  const size_t index_;
  const Lib* lib_;
  int bell_;  // eventfd (-1 in a forked child): wakes the thread (new work, re-arming, closes)
  int tick_;  // timerfd (-1 in a forked child): ticks while a handshake or a listener waits
  std::mutex lock_;
  std::vector<Listener*> listeners_;
  std::vector<ToConnect> to_connect_;
  std::vector<Connector> connectors_;
  std::vector<Pending> pending_;  // Hello not complete yet, or complete and parked
  std::vector<Waiting> waiting_;
  std::vector<Armed> armed_;
  std::vector<int> to_close_;
  std::vector<ToShutdown> to_shutdown_;
  uint64_t shutdown_tickets_ = 0;  // the last ticket given
  uint64_t shutdowns_started_ = 0;  // the thread has taken every shutdown up to this ticket
  uint64_t shutdowns_done_ = 0;     // every shutdown up to this ticket is done
  std::condition_variable shutdown_done_;  // either of the two moved
};

}  // namespace fastsock::vendors
