// The connection manager side of the verbs link: one service per process that owns the
// librdmacm event channel, listens next to every listening TCP socket, drives connectors
// through address and route resolution, and matches incoming RDMA connections to the TCP
// connections they belong to.
//
// Why a thread: an RDMA connect request has to be answered whether or not the application
// is inside a socket call at that moment (a server blocked in epoll_wait on other sockets
// must not stall a connector), and a connector's resolution steps arrive as events. The
// thread sleeps in poll() on the channel; an idle process pays nothing. It starts with the
// first listener or connector of the process that may use verbs, and opens the event
// channel itself: librdmacm's first call in a process opens every RDMA device (about
// 100 ms in the Soft-RoCE VM), which a connector's connect() does not wait for.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "shm_peer_cookie.hpp"
#include "stats_layout.hpp"
#include "verbs_lib.hpp"
#include "verbs_pool.hpp"
#include "verbs_redirect.hpp"
#include "verbs_wire.hpp"

namespace fastsock::verbs {

class Conn;

// What the service tells a connection (always under Cm::lock(), on the service thread or
// in the thread that registered it). Implemented by Conn.
class CmClient {
 public:
  // Connector: the route is known; create the queue pair on id's device and connect.
  // Acceptor: a connect request for this connection arrived on `id`; accept it.
  // Return 0 or -errno with `why` (the service rejects then). on_request: the client owns
  // `id` from the call on, refused or not, and destroys it when it goes.
  virtual int on_route(rdma_cm_id* id, const char** why) noexcept = 0;
  // Connector whose Cm::connect was queued while the service opened its channel: its
  // resolution has started on `id` (the client owns it, as Cm::connect's id_out).
  virtual void on_connect_started(rdma_cm_id* id) noexcept = 0;
  virtual int on_request(rdma_cm_id* id, const ConnectData& data, const char** why) noexcept = 0;
  // Connector: the acceptor's answer (its private data); the connection is to be made
  // ready and established (rdma_establish), or failed.
  virtual void on_connect_response(const void* private_data, uint8_t len) noexcept = 0;
  // Connector: the listener's process did not accept the connection and redirects the
  // request to `port` (a pre-forking server's child: verbs_redirect.hpp). Connect there
  // (Cm::connect on the same address), or return -errno with `why`.
  virtual int on_redirect(uint16_t port, const char** why) noexcept = 0;
  // Acceptor: the connection is up.
  virtual void on_established() noexcept = 0;
  // The client accepts (its connect request came from the peer) rather than connects.
  virtual bool accepting() const noexcept = 0;
  virtual void on_failed(const char* why) noexcept = 0;  // static string
  virtual void on_disconnected() noexcept = 0;
  // The device under the connection is going away: the connection moves to TCP and frees
  // everything it holds on the device. Returns its id, for the service to destroy once the
  // event is acknowledged (the client forgets it).
  virtual rdma_cm_id* on_device_removal() noexcept = 0;
  // The receive pool of the client's device runs low (its SRQ's limit event): take the
  // completions waiting in the client's queue and, with `copy_out`, copy out of the pool
  // what it holds.
  virtual void on_pool_low(bool copy_out) noexcept = 0;
  // In a forked child: the client's device resources are its parent's. It drops its
  // pointers to them (a child that polled the parent's completion queue or posted to its
  // shared receive queue, both mapped shared, would take the parent's messages).
  virtual void forget_after_fork() noexcept = 0;

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
  // be used here (no library, no device, no channel). A forked child starts its own: the
  // parent's thread is not in the child, and the parent's listeners and connection ids
  // stay the parent's (the child never destroys them, it only forgets them).
  // Waits until the service's event channel is open (listeners need it at once).
  static Cm* get(const char** why) noexcept;
  // The same without waiting for the channel (a connector: Cm::connect queues meanwhile);
  // nullptr only once the service is known to be unusable.
  static Cm* get_started(const char** why) noexcept;

  std::mutex& lock() noexcept { return lock_; }

  // A listening socket bound to `local`, whose kernel cookie (SO_COOKIE) is `tcp_cookie`
  // (0: unknown): listens in the RDMA port space on the same port (a loopback or wildcard
  // address listens on every RDMA device). Returns a handle or nullptr with `why`.
  void* listen(const stats::Endpoint& local, uint64_t tcp_cookie, const char** why) noexcept;
  // Static: a listener inherited over fork is only forgotten, and needs no service.
  static void unlisten(void* handle) noexcept;
  // The listener was opened by this process, not inherited over fork: only then do the
  // connect requests for its accepted connections reach this process.
  static bool listens_here(const void* handle) noexcept;
  // A listener inherited over fork (a pre-forking server's child accepted `key` on it):
  // listens on a port of this process's own, if not yet, and asks the listening process
  // to redirect the connection's request there (verbs_redirect.hpp). Call after
  // add_acceptor. 0 or -errno with `why`.
  int redirect_here(void* handle, const TcpKey& key, const char** why) noexcept;

  // Connector: starts resolving `dst` from `src`, the TCP connection's own address, so
  // that the request leaves from the address the acceptor knows the connector by
  // (verbs_claim.hpp); a loopback destination is reached through this host's RDMA address,
  // from that address. The client hears the outcome. 0 or -errno with `why`. While the
  // service still opens its channel the request is queued (*id_out stays null) and the
  // client hears on_connect_started or on_failed once it is open. Under lock().
  int connect(CmClient* client, const stats::Endpoint& src, const stats::Endpoint& dst,
              rdma_cm_id** id_out, const char** why) noexcept;

  // Acceptor: announces the connection; a request that already arrived for it is handed
  // over at once (client->on_request, in this thread). Under lock().
  void add_acceptor(CmClient* client, const TcpKey& key) noexcept;
  // The connection goes away: no event reaches `client` after this returns. `id` (may be
  // null) is destroyed afterwards by the caller, outside the lock.
  void forget(CmClient* client, rdma_cm_id* id) noexcept;

  const Lib& lib() const noexcept { return *lib_; }

  // A descriptor that is always readable (an eventfd never read). A connection whose link
  // fails adds it to its wake-up set, so that a thread asleep on the link (whose
  // completion channel may be gone with the device) wakes and moves to TCP.
  int always_ready_fd() const noexcept { return always_ready_; }

  // Under lock(): this process's own context of the device `cm_verbs` (an id's context,
  // which librdmacm may have opened in a parent process) belongs to; nullptr if it cannot
  // be opened. Why: a forked child cannot use a context its parent opened (the kernel
  // refuses its write() commands, ibv_post_send among them, with EACCES), so queue pairs
  // live on contexts the process opened itself, and librdmacm only manages connections.
  // Each successful call is paired with release_context(); a context whose device was
  // removed closes when its last user releases it (the kernel completes the removal only
  // once every process closed its contexts of the device).
  // The context comes with its receive pool (verbs_pool.hpp, made with the first user's
  // `slot_bytes`), whose limit events reach every user through on_pool_low.
  ibv_context* own_context(ibv_context* cm_verbs, CmClient* user, uint32_t slot_bytes,
                           RecvPool** pool) noexcept;
  void release_context(ibv_context* context, CmClient* user) noexcept;

  // A pre-forking server whose listening process exits while its children still listen
  // on the socket (a daemon that listens, forks and exits: nginx by default;
  // verbs_successor.cc). Each listener this process inherited is checked: one whose owner
  // has exited is taken over here (its RDMA port listened again, this process the redirect
  // table's owner); one whose owner lives is watched by the service (a pidfd), to be taken
  // over when it exits. Called before a fork and when a connection is accepted on an
  // inherited listener; cheap when there is nothing inherited.
  static void check_inherited() noexcept;

  // Registered with the core's fork hook (src/process.hpp): the service's lock is held
  // across fork, and the child drops the parent's service to start its own on first use.
  static void fork_prepare() noexcept;
  static void fork_parent() noexcept;
  static void fork_child() noexcept;

 private:
  Cm(const Lib* lib, int bell, int always_ready)
      : lib_(lib), bell_(bell), always_ready_(always_ready) {}
  static Cm* start(const char** why) noexcept;  // a new service, its thread running
  void run() noexcept;
  // Service thread, first thing: opens the event channel and starts the queued connects.
  // False (the reason in failure_) if the channel cannot be opened.
  bool open_channel() noexcept;
  // The channel is open (or can never be): `why` if not usable.
  bool usable(const char** why) const noexcept;
  // Under lock_ with the channel open.
  int connect_now(CmClient* client, const stats::Endpoint& src, const stats::Endpoint& dst,
                  rdma_cm_id** id_out, const char** why) noexcept;
  // Under lock_: handles one event; returns an id to destroy once the event is acknowledged.
  rdma_cm_id* dispatch(rdma_cm_event* event) noexcept;
  // Under lock_: false when the request was rejected and nobody holds its id (the caller
  // destroys it then); a parked id, or one offered to a connection, is kept.
  bool on_connect_request(rdma_cm_id* id, const void* data, uint8_t len) noexcept;
  // Whether the request on `id` comes from the connector of the TCP connection `key`.
  bool from_claimed_peer(rdma_cm_id* id, const TcpKey& key) noexcept;
  // Under lock_: hands a connect request to the connection it belongs to, which owns the
  // id from then on, whether it accepts or refuses.
  void offer(CmClient* client, rdma_cm_id* id, const ConnectData& data) noexcept;
  void expire_parked() noexcept;
  // Under lock_: a child of this process published a redirect for the connection `key`:
  // rejects the request on `id` with it and returns true (nobody holds the id then).
  bool redirect(rdma_cm_id* id, const TcpKey& key) noexcept;
  // Parked requests whose connection a child has accepted meanwhile: redirected.
  void redirect_parked() noexcept;
  // Under lock_: an RDMA device is going away; `id` is one of ours on it. Returns an id
  // to destroy once the event is acknowledged.
  rdma_cm_id* device_removal(rdma_cm_id* id) noexcept;
  // After the ids on a removed device are destroyed: librdmacm closes its own context of
  // the device only when it rescans the device list (rdma_get_devices), finds the device
  // gone and no id left on it. The device leaves the list a moment after its
  // connection-manager events (when the kernel's verbs layer starts waiting for every
  // process to close it), so the service rescans every 100 ms until it is gone. True
  // while still there. Limits (librdmacm 44): a rescan that finds no device at all does
  // nothing, so when the last device goes librdmacm keeps its context, and the kernel's
  // removal waits for the process to exit (docs/verbs.md, Failure); a rescan opens every
  // other device, which librdmacm then keeps open.
  bool let_librdmacm_close_removed() noexcept;


  struct Parked {  // a connect request whose TCP connection is not accepted yet
    TcpKey key;
    rdma_cm_id* id;
    ConnectData data;
    int64_t since_ns;
  };
  struct Listener {
    Cm* cm;
    rdma_cm_id* id;
    pid_t owner;  // a forked child inherits the handle, not the listener
    stats::Endpoint local;
    bool any_address;          // wildcard or loopback: listens on every RDMA address
    int64_t linger_until_ns;   // closed: destroyed when no accepted connection awaits it
    // For the children it forks (verbs_redirect.hpp): the table they publish redirects
    // in, and a descriptor of the owner's bell that they ring then, made at the owner's
    // first fork after listen() (fork_prepare), so a process that never forks has
    // neither. Null / -1 for a child's own listener (`for_children` false).
    bool for_children = false;
    RedirectTable* redirects = nullptr;
    int owner_bell = -1;
    // In a forked child only: the listener of the child's own where it is redirected to.
    Listener* child_listener = nullptr;
    // Held for the children (a pre-forking server whose listening process closes its
    // descriptor while its children still accept on theirs): the TCP socket's cookie, and
    // whether sock_diag found it by that cookie at the first fork (so that its absence
    // later means it closed everywhere). `held`: in closing_, kept while the socket still
    // listens in some process, asked every kHeldCheckNs (next_check_ns).
    uint64_t tcp_cookie = 0;
    bool diag_finds = false;
    bool held = false;
    int64_t next_check_ns = 0;
    // Taken over from a listening process that exited (verbs_successor.cc): its
    // `owner_bell` is that process's bell, which the children still ring, and which the
    // service here polls.
    bool adopted = false;
  };
  // A listener inherited over fork whose socket this process holds: taken over if its
  // owner exits (check_inherited). `watched`: the owner `pidfd` refers to (-1: none).
  struct Inherited {
    Listener* l;
    pid_t watched;
    int pidfd;
    bool gave_up;  // the takeover failed for another reason than a sibling's: not retried
  };
  static constexpr int kMaxInherited = 16;
  // Lock order: inherited_lock_, then g_start_lock (verbs_cm.cc), then a service's lock_.
  static std::mutex inherited_lock_;
  static Inherited inherited_[kMaxInherited];  // under inherited_lock_
  static int inherited_count_;                 // under inherited_lock_
  // In a forked child (the locks held across the fork): the parent's own listeners for
  // children are inherited here.
  static void inherit_listeners(const Cm& parent) noexcept;
  // Under inherited_lock_: whether the owner of entry `in` has exited; if not, this
  // service watches it.
  bool owner_gone_locked(Inherited& in) noexcept;
  // Under inherited_lock_: takes `l` over from its exited owner `gone`; false if a sibling
  // did first, or it failed (`*retry` false then).
  bool adopt_locked(Listener* l, pid_t gone, bool* retry) noexcept;
  static void drop_inherited_locked(int index) noexcept;
  // Under inherited_lock_: the owners' pidfds the service polls; how many.
  static nfds_t inherited_pidfds_locked(pollfd* out, nfds_t room) noexcept;
  // An RDMA listener on `local` (port 0: one the kernel picks), not registered anywhere;
  // *any_address: it listens on every RDMA address.
  rdma_cm_id* bind_listener(const stats::Endpoint& local, bool* any_address,
                            const char** why) noexcept;
  // A new listener on `local` (port 0: one the kernel picks); `for_children`: it gets a
  // redirect table and bell before a fork (see Listener). Registered in listeners_.
  // Before a fork (lock_ held): each of this process's listeners for children gets its
  // redirect table and bell, if it has none yet.
  void prepare_redirects_locked() noexcept;
  Listener* open_listener(const stats::Endpoint& local, bool for_children,
                          const char** why) noexcept;
  // Frees a listener this process opened, its id already destroyed (or never made).
  static void free_listener(Listener* l) noexcept;
  struct Waiting {  // an accepted TCP connection whose connect request has not arrived
    TcpKey key;
    CmClient* client;
  };
  void forget_listener(Listener* l) noexcept;  // under lock_
  // Under lock_: an accepted connection still waits for a request on `l`'s port.
  bool awaited(const Listener& l) const noexcept;
  // Destroys closed listeners nobody needs any more (unlisten, held listeners); returns
  // how many.
  size_t reap_listeners() noexcept;
  // Under lock_: whether a held listener's TCP socket still listens in some process.
  bool still_held(Listener& l) noexcept;
  // A listener of ours on `port` is held for the children: checked now, and destroyed if
  // no child listens any more (a process that listens again on the port at once, before
  // the periodic check). True if one was destroyed.
  bool release_held(uint16_t port) noexcept;

  const Lib* lib_;
  enum class Channel : int { opening, open, failed };
  std::atomic<Channel> channel_state_{Channel::opening};  // waited on by get()
  rdma_event_channel* channel_ = nullptr;  // set once, under lock_, when it opens
  const char* failure_ = nullptr;          // why it did not
  struct QueuedConnect {  // a connector's request made while the channel was opening
    CmClient* client;
    stats::Endpoint src, dst;
  };
  std::vector<QueuedConnect> queued_;  // under lock_
  int bell_;  // eventfd: wakes the service (a closed listener to time)
  int always_ready_;
  std::mutex lock_;
  std::mutex redirect_lock_;  // makes a child's own listener once (redirect_here)
  std::vector<Listener*> listeners_;  // under lock_: every live one, closing ones too
  std::vector<Listener*> closing_;  // under lock_
  std::vector<Parked> parked_;    // under lock_
  char removed_device_[64] = {};  // service thread: a removed device librdmacm may still hold
  int64_t removal_until_ns_ = 0;  // service thread: rescans end then at the latest
  std::vector<Waiting> waiting_;  // under lock_
  shm::DiagSocket diag_;          // under lock_: held listeners' checks
  struct Context {
    ibv_device* device;
    ibv_context* context;  // kept while the device is there
    RecvPool* pool;
    std::vector<CmClient*> users;  // connections with resources on it
    bool removed;          // the device is going away: closed at the last release
  };
  void close_context(size_t index) noexcept;
  // Service thread: takes the context's asynchronous events; on the pool's limit event
  // every user copies out what it holds, then the event is re-armed.
  void take_async_events(Context& c) noexcept;
  std::vector<Context> contexts_;  // under lock_
};

}  // namespace fastsock::verbs
