#include "verbs_cm.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <vector>

#include "endpoint.hpp"
#include "guard.hpp"
#include "internal_fds.hpp"
#include "log.hpp"
#include "process.hpp"
#include "real.hpp"
#include "service_thread.hpp"
#include "verbs_claim.hpp"

namespace fastsock::verbs {

namespace {

// Resolution steps are local (ARP/neighbour and the device's routes): a few milliseconds
// on a working fabric; the TCP connection carries the data meanwhile.
constexpr int kResolveMs = 2000;
// A connect request whose TCP connection was never accepted (the application never called
// accept(), or the connector lied) is rejected after this long.
constexpr int64_t kParkedNs = 10'000'000'000;
// How long after a device's removal the service keeps rescanning for librdmacm's sake
// (let_librdmacm_close_removed): the kernel's removal waits for it.
constexpr int64_t kRemovalRescanNs = 10'000'000'000;
// Devices whose asynchronous events (the receive pool's limit) the service watches; a host
// has one or two.
constexpr nfds_t kMaxWatchedContexts = 8;
// The bells of listeners taken over from an exited process (check_inherited) it polls.
constexpr nfds_t kMaxAdoptedBells = 8;

int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The port a reject's private data redirects to (RedirectData), or 0.
uint16_t redirect_port(const void* data, uint8_t len) noexcept {
  RedirectData r;
  if (!data || len < sizeof r) return 0;
  memcpy(&r, data, sizeof r);
  if (ntohs(r.magic) != kWireMagic || r.version != kWireVersion || r.kind != kRedirect) return 0;
  return ntohs(r.port);
}

bool same(const TcpKey& a, const TcpKey& b) noexcept {
  return same_endpoint(a.local, b.local) && same_endpoint(a.peer, b.peer);
}

bool is_wildcard(const stats::Endpoint& ep) noexcept {
  for (int i = 0; i < (ep.family == AF_INET ? 4 : 16); ++i)
    if (ep.addr[i]) return false;
  return true;
}

TcpKey key_of(const ConnectData& d) noexcept {
  TcpKey k{};
  k.local.family = k.peer.family = d.family;
  k.local.port = ntohs(d.server_port);
  k.peer.port = ntohs(d.client_port);
  memcpy(k.local.addr, d.server_addr, 16);
  memcpy(k.peer.addr, d.client_addr, 16);
  return k;
}

// An address of this host on an RDMA device (the first found), for connections to a
// loopback address: rxe and real RDMA devices cannot route 127.0.0.1, but both ends of such
// a connection are on this host, so the device's own address reaches the listener.
bool local_rdma_address(const Lib& lib, sockaddr_storage& out) noexcept {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    rdma_cm_id* probe = nullptr;
    if (lib.rdma_create_id(nullptr, &probe, nullptr, RDMA_PS_TCP) != 0) continue;
    sockaddr_storage addr{};
    memcpy(&addr, i->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (lib.rdma_bind_addr(probe, reinterpret_cast<sockaddr*>(&addr)) == 0 && probe->verbs) {
      out = addr;
      found = true;
    }
    lib.rdma_destroy_id(probe);
  }
  freeifaddrs(list);
  return found;
}

// The service of this process: set once started, reset in a forked child.
std::atomic<Cm*> g_cm{nullptr};
// Serialises starting the service; held across fork (fork_prepare) so a child never
// inherits it locked.
std::mutex g_start_lock;
bool g_start_tried = false;  // under g_start_lock
const char* g_start_failure = nullptr;

// A closed listener with accepted connections still waiting for their connect requests
// listens on for them (a program may accept one connection and close its listener at
// once), up to this long: a connector gives up connecting after 5 s (verbs_conn.cc).
constexpr int64_t kLingerNs = 6'000'000'000;
// A listener held for a pre-forking server's children (Listener::held) is checked this
// often: its RDMA port stays taken up to this long after the last child closed its socket.
constexpr int64_t kHeldCheckNs = 1'000'000'000;

// open_listener's reason when the RDMA port is taken (compared by address).
constexpr const char* kPortTaken = "the RDMA port is taken (another listener on this port)";

}  // namespace

Cm* Cm::get_started(const char** why) noexcept {
  Cm* cm = g_cm.load(std::memory_order_acquire);
  if (!cm) {
    std::lock_guard starting(g_start_lock);
    if (!g_start_tried) {
      g_start_tried = true;
      g_start_failure = nullptr;
      ReentryGuard guard;
      if (Cm* started = start(&g_start_failure)) g_cm.store(started, std::memory_order_release);
    }
    cm = g_cm.load(std::memory_order_acquire);
    if (!cm) {
      if (why) *why = g_start_failure ? g_start_failure : "unavailable";
      return nullptr;
    }
  }
  if (cm->channel_state_.load(std::memory_order_acquire) == Channel::failed) {
    if (why) *why = cm->failure_;
    return nullptr;
  }
  return cm;
}

Cm* Cm::get(const char** why) noexcept {
  Cm* cm = get_started(why);
  if (!cm) return nullptr;
  // Never under g_start_lock: the service holds it while it opens the channel.
  cm->channel_state_.wait(Channel::opening, std::memory_order_acquire);
  return cm->usable(why) ? cm : nullptr;
}

bool Cm::usable(const char** why) const noexcept {
  if (channel_state_.load(std::memory_order_acquire) == Channel::open) return true;
  if (why) *why = failure_ ? failure_ : "the RDMA connection manager is not open yet";
  return false;
}

Cm* Cm::start(const char** why) noexcept {
  const Lib* l = verbs::lib(why);
  if (!l) return nullptr;
  // Not interposed calls; registered below.
  const int bell = internal_fds::relocate(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  const int always_ready = internal_fds::relocate(eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));
  Cm* cm = bell >= 0 && always_ready >= 0 ? new (std::nothrow) Cm(l, bell, always_ready) : nullptr;
  if (!cm) {
    *why = bell >= 0 && always_ready >= 0 ? "out of memory" : "no descriptor for the service's bell";
    if (bell >= 0) real().close(bell);
    if (always_ready >= 0) real().close(always_ready);
    return nullptr;
  }
  internal_fds::add(bell);
  internal_fds::add(always_ready);
  const int rc = start_service_thread([](void* self) { static_cast<Cm*>(self)->run(); }, cm);
  if (rc != 0) {
    *why = "cannot start the connection-manager thread";
    internal_fds::close(bell);
    internal_fds::close(always_ready);
    delete cm;
    return nullptr;
  }
  return cm;
}

bool Cm::open_channel() noexcept {
  const char* failure = nullptr;
  rdma_event_channel* channel;
  {
    // Held while librdmacm initialises (its first call opens every device under its own
    // lock): fork_prepare takes it too, so no child inherits librdmacm's lock taken.
    std::lock_guard starting(g_start_lock);
    channel = lib_->rdma_create_event_channel();
    if (!channel) {
      failure = "cannot open the RDMA connection manager (/dev/infiniband/rdma_cm)";
    } else {
      // Non-blocking: the service takes events under its lock, which must never wait on I/O.
      const int flags = real().fcntl(channel->fd, F_GETFL);
      if (flags < 0 || real().fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        failure = "cannot make the RDMA event channel non-blocking";
        lib_->rdma_destroy_event_channel(channel);
        channel = nullptr;
      }
    }
  }
  std::lock_guard lock(lock_);
  if (channel) {
    internal_fds::add(channel->fd);
    channel_ = channel;
  } else {
    failure_ = failure;
    LOG_DEBUG("verbs: %s: this process's connections stay on TCP", failure);
  }
  channel_state_.store(channel ? Channel::open : Channel::failed, std::memory_order_release);
  channel_state_.notify_all();
  for (const QueuedConnect& q : queued_) {
    rdma_cm_id* id = nullptr;
    const char* why = failure;
    if (channel && connect_now(q.client, q.src, q.dst, &id, &why) == 0)
      q.client->on_connect_started(id);
    else
      q.client->on_failed(why);
  }
  queued_.clear();
  queued_.shrink_to_fit();
  return channel != nullptr;
}

void Cm::fork_prepare() noexcept {
  check_inherited();  // the child inherits a listener that is answered (or watched)
  inherited_lock_.lock();
  g_start_lock.lock();
  if (Cm* cm = g_cm.load(std::memory_order_acquire)) {
    cm->lock_.lock();
    cm->prepare_redirects_locked();
  }
}

// Without them a forked child's connections on a listener stay on TCP (with the reason);
// this process's own are not affected. Made here, once, so that only a process that forks
// pays the table (16 KiB) and the descriptor.
// The listening socket is looked up by its cookie here, while it is certainly open, so that
// its absence later means it closed in every process (Listener::held), not that this kernel
// has no sock_diag for TCP.
void Cm::prepare_redirects_locked() noexcept {
  const pid_t self = getpid();
  for (Listener* l : listeners_) {
    if (!l->for_children || l->owner != self || l->redirects) continue;
    l->redirects = RedirectTable::create(self);
    if (l->owner_bell < 0) {
      l->owner_bell = internal_fds::dup(bell_);
    }
    const char* why = "the listening socket's cookie is unknown";
    l->diag_finds = l->tcp_cookie && diag_.still_listening(l->local, l->tcp_cookie, &why) == 1;
    if (!l->diag_finds)
      LOG_DEBUG("verbs: cannot look up the listening socket on port %u (%s): its RDMA "
                "listener will close with this process's descriptor, even if a child still "
                "listens", unsigned(l->local.port), why);
  }
}

void Cm::fork_parent() noexcept {
  if (Cm* cm = g_cm.load(std::memory_order_acquire)) cm->lock_.unlock();
  g_start_lock.unlock();
  inherited_lock_.unlock();
}

// The parent's service is not the child's: its thread is gone, and its event channel and
// ids belong to the parent (the channel's file is shared, so closing our descriptor of it
// is safe; destroying an id through it would destroy the parent's). The old object is left
// as it is (connections inherited from the parent still point at it) and the child starts
// its own service on first use.
void Cm::fork_child() noexcept {
  if (Cm* cm = g_cm.load(std::memory_order_acquire)) {
    inherit_listeners(*cm);
    for (Context& c : cm->contexts_)
      for (CmClient* user : c.users) user->forget_after_fork();
    cm->diag_.close();  // the parent's: its replies must not reach the child
    cm->lock_.unlock();
    if (cm->channel_) internal_fds::close(cm->channel_->fd);
    internal_fds::close(cm->bell_);
    g_cm.store(nullptr, std::memory_order_release);
  }
  g_start_tried = false;
  g_start_lock.unlock();
  inherited_lock_.unlock();
}

namespace {
const bool g_fork_registered =
    (register_fork_handlers(ForkHandlers{Cm::fork_prepare, Cm::fork_parent, Cm::fork_child}), true);
}  // namespace

void Cm::run() noexcept {
  ReentryGuard guard;  // everything this thread does is the library's own work
  pthread_setname_np(pthread_self(), "fastsock-rdmacm");
  if (!open_channel()) return;
  for (;;) {
    bool timed;  // something expires: wake up at least every second
    {
      std::lock_guard lock(lock_);
      timed = !parked_.empty() || !closing_.empty();
    }
    // The channel, our bell, the devices' async events, the bells of listeners taken over
    // (their children ring them) and the pidfds of inherited listeners' owners.
    pollfd p[2 + kMaxWatchedContexts + kMaxAdoptedBells + kMaxInherited] = {
        {channel_->fd, POLLIN, 0}, {bell_, POLLIN, 0}};
    nfds_t watched = 2;
    {
      std::lock_guard lock(lock_);
      for (const Context& c : contexts_)
        if (watched < 2 + kMaxWatchedContexts) p[watched++] = pollfd{c.context->async_fd, POLLIN, 0};
    }
    const nfds_t contexts_end = watched;
    {
      std::lock_guard lock(lock_);
      for (const Listener* l : listeners_)
        if (l->adopted && watched < contexts_end + kMaxAdoptedBells)
          p[watched++] = pollfd{l->owner_bell, POLLIN, 0};
    }
    const nfds_t bells_end = watched;
    {
      std::lock_guard inherited(inherited_lock_);
      watched += inherited_pidfds_locked(p + watched, kMaxInherited);
    }
    const int n = real().poll(p, watched, removal_until_ns_ ? 100 : timed ? 1000 : -1);
    if (n < 0 && errno != EINTR) return;
    if (n > 0 && p[1].revents) {
      uint64_t rings;
      (void)!real().read(bell_, &rings, sizeof rings);
    }
    if (n > 0) {
      std::lock_guard lock(lock_);
      for (nfds_t i = 2; i < contexts_end; ++i) {
        if (!p[i].revents) continue;
        for (Context& c : contexts_)
          if (c.context->async_fd == p[i].fd) take_async_events(c);
      }
      // Read only while the listener still has it: a closed one's number may be reused.
      for (nfds_t i = contexts_end; i < bells_end; ++i) {
        if (!p[i].revents) continue;
        for (const Listener* l : listeners_) {
          if (!l->adopted || l->owner_bell != p[i].fd) continue;
          uint64_t rings;
          (void)!real().read(l->owner_bell, &rings, sizeof rings);
        }
      }
    }
    for (nfds_t i = bells_end; n > 0 && i < watched; ++i) {
      if (!p[i].revents) continue;
      check_inherited();  // an owner exited
      break;
    }
    while (n > 0) {
      // Taken and acknowledged under the lock, so that fork (which holds it) never
      // splits an event between parent and child.
      rdma_cm_id* destroy_after_ack = nullptr;
      bool removal = false;
      {
        std::lock_guard lock(lock_);
        rdma_cm_event* event = nullptr;
        if (lib_->rdma_get_cm_event(channel_, &event) != 0) break;  // EAGAIN: all taken
        removal = event->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
        destroy_after_ack = dispatch(event);
        lib_->rdma_ack_cm_event(event);
      }
      if (destroy_after_ack) lib_->rdma_destroy_id(destroy_after_ack);
      if (removal) removal_until_ns_ = now_ns() + kRemovalRescanNs;
    }
    redirect_parked();
    expire_parked();
    reap_listeners();
    if (removal_until_ns_ && (!let_librdmacm_close_removed() || now_ns() > removal_until_ns_))
      removal_until_ns_ = 0;
  }
}

rdma_cm_id* Cm::dispatch(rdma_cm_event* event) noexcept {
  rdma_cm_id* const id = event->id;
  rdma_cm_id* destroy_after_ack = nullptr;
  {
    auto* client = static_cast<CmClient*>(id->context);
    const char* failure = nullptr;
    switch (event->event) {
      case RDMA_CM_EVENT_CONNECT_REQUEST:
        if (!on_connect_request(id, event->param.conn.private_data,
                                event->param.conn.private_data_len))
          destroy_after_ack = id;  // rejected, and nobody holds it
        break;
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (client && lib_->rdma_resolve_route(id, kResolveMs) != 0) failure = "route resolution failed";
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (client) {
          const char* why = "cannot connect";
          if (client->on_route(id, &why) != 0) failure = why;
        }
        break;
      case RDMA_CM_EVENT_CONNECT_RESPONSE:  // the connector's queue pair is its own
        if (client) client->on_connect_response(event->param.conn.private_data,
                                                event->param.conn.private_data_len);
        break;
      case RDMA_CM_EVENT_ESTABLISHED:
        if (client) client->on_established();
        break;
      case RDMA_CM_EVENT_ADDR_ERROR: failure = "no RDMA route to the peer's address"; break;
      case RDMA_CM_EVENT_ROUTE_ERROR: failure = "no RDMA route to the peer"; break;
      case RDMA_CM_EVENT_UNREACHABLE: failure = "the peer is unreachable over RDMA"; break;
      case RDMA_CM_EVENT_CONNECT_ERROR: failure = "RDMA connection error"; break;
      case RDMA_CM_EVENT_REJECTED: {
        const uint16_t port = redirect_port(event->param.conn.private_data,
                                            event->param.conn.private_data_len);
        if (client && port) {
          const char* why = "cannot follow the listener's redirect";
          if (client->on_redirect(port, &why) == 0) {
            destroy_after_ack = id;  // the client connects on a new id
            break;
          }
          failure = why;
          break;
        }
        // An acceptor's answer is rejected by a connector that gave the RDMA connection
        // up meanwhile (its connection ended, or its time ran out).
        failure = client && client->accepting()
                      ? "the connector gave the RDMA connection up (rejected)"
                      : "the peer has no fastsock RDMA listener (rejected)";
        break;
      }
      case RDMA_CM_EVENT_DEVICE_REMOVAL: destroy_after_ack = device_removal(id); break;
      case RDMA_CM_EVENT_DISCONNECTED:
        if (client) client->on_disconnected();
        for (size_t i = 0; i < parked_.size(); ++i) {
          if (parked_[i].id != id) continue;
          destroy_after_ack = id;
          parked_.erase(parked_.begin() + long(i));
          break;
        }
        break;
      default: break;
    }
    if (failure && client) client->on_failed(failure);
  }
  return destroy_after_ack;
}

rdma_cm_id* Cm::device_removal(rdma_cm_id* id) noexcept {
  if (id->verbs)
    snprintf(removed_device_, sizeof removed_device_, "%s", id->verbs->device->name);
  if (id->verbs) {
    for (size_t i = 0; i < contexts_.size(); ++i) {
      if (contexts_[i].device != id->verbs->device) continue;
      contexts_[i].removed = true;
      if (contexts_[i].users.empty()) close_context(i);
      break;
    }
  }
  if (auto* client = static_cast<CmClient*>(id->context)) return client->on_device_removal();
  for (Listener* l : listeners_) {
    if (l->id != id) continue;
    LOG_DEBUG("verbs: the RDMA device under the listener on port %u was removed: new "
              "connections to it stay on TCP", unsigned(l->local.port));
    l->id = nullptr;
    return id;
  }
  for (size_t i = 0; i < parked_.size(); ++i) {
    if (parked_[i].id != id) continue;
    parked_.erase(parked_.begin() + long(i));
    return id;
  }
  return nullptr;
}

bool Cm::let_librdmacm_close_removed() noexcept {
  ReentryGuard guard;
  ibv_context** list = lib_->rdma_get_devices(nullptr);
  bool present = false;
  for (int i = 0; list && list[i]; ++i)
    present |= strcmp(list[i]->device->name, removed_device_) == 0;
  if (list) lib_->rdma_free_devices(list);
  return present;
}

void Cm::forget_listener(Listener* l) noexcept {
  for (size_t i = 0; i < listeners_.size(); ++i) {
    if (listeners_[i] != l) continue;
    listeners_.erase(listeners_.begin() + long(i));
    return;
  }
}

// The request's source address must be its claimed connector's (verbs_claim.hpp).
bool Cm::from_claimed_peer(rdma_cm_id* id, const TcpKey& key) noexcept {
  auto endpoint_of = [](const sockaddr* sa) {
    return endpoint_from(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  };
  const stats::Endpoint source = endpoint_of(rdma_get_peer_addr(id));
  const stats::Endpoint arrived = endpoint_of(rdma_get_local_addr(id));
  if (request_may_claim(source, arrived, key.peer)) return true;
  if (log_enabled(LogLevel::debug)) {
    char from[64], claimed[64], local[64];
    format_endpoint(source, from, sizeof from);
    format_endpoint(key.peer, claimed, sizeof claimed);
    format_endpoint(key.local, local, sizeof local);
    LOG_DEBUG("verbs: refused a connect request from %s for the connection %s -> %s: "
              "not the connector's address", from, claimed, local);
  }
  return false;
}

bool Cm::on_connect_request(rdma_cm_id* id, const void* raw, uint8_t len) noexcept {
  ConnectData data;
  if (!raw || len < sizeof data) {
    (void)lib_->rdma_reject(id, nullptr, 0);
    return false;
  }
  memcpy(&data, raw, sizeof data);
  if (ntohs(data.magic) != kWireMagic || data.version != kWireVersion ||
      (data.family != AF_INET && data.family != AF_INET6)) {
    (void)lib_->rdma_reject(id, nullptr, 0);
    return false;
  }
  const TcpKey key = key_of(data);
  if (!from_claimed_peer(id, key)) {
    (void)lib_->rdma_reject(id, nullptr, 0);
    return false;
  }
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (!same(waiting_[i].key, key)) continue;
    CmClient* client = waiting_[i].client;
    waiting_.erase(waiting_.begin() + long(i));
    offer(client, id, data);
    return true;
  }
  if (redirect(id, key)) return false;
  // The TCP connection is not accepted yet: kept until it is (add_acceptor), here or, in
  // a pre-forking server, by a child (redirect_parked).
  try {
    parked_.push_back(Parked{key, id, data, now_ns()});
  } catch (...) {
    (void)lib_->rdma_reject(id, nullptr, 0);
    return false;
  }
  return true;
}

void Cm::offer(CmClient* client, rdma_cm_id* id, const ConnectData& data) noexcept {
  id->context = client;
  const char* why = "";
  if (client->on_request(id, data, &why) == 0) return;
  // Refused: the client owns the id all the same and destroys it when it goes. Destroying
  // it here too freed librdmacm's memory twice, which crashed redis-server (rdma_redis)
  // in unrelated places later. Its further events go to nobody.
  id->context = nullptr;
  client->on_failed(why);
  (void)lib_->rdma_reject(id, nullptr, 0);
}

void Cm::expire_parked() noexcept {
  std::vector<rdma_cm_id*> expired;
  {
    std::lock_guard lock(lock_);
    const int64_t now = now_ns();
    for (size_t i = 0; i < parked_.size();) {
      if (now - parked_[i].since_ns < kParkedNs) {
        ++i;
        continue;
      }
      rdma_cm_id* id = parked_[i].id;
      parked_.erase(parked_.begin() + long(i));
      (void)lib_->rdma_reject(id, nullptr, 0);
      try {
        expired.push_back(id);
      } catch (...) {
      }
    }
  }
  for (rdma_cm_id* id : expired) lib_->rdma_destroy_id(id);
}

bool Cm::redirect(rdma_cm_id* id, const TcpKey& key) noexcept {
  for (Listener* l : listeners_) {
    if (!l->redirects || l->owner != getpid() || l->local.port != key.local.port) continue;
    const uint16_t port = l->redirects->take(key);
    if (port == 0) continue;
    const RedirectData data{htons(kWireMagic), kWireVersion, kRedirect, htons(port), {}};
    (void)lib_->rdma_reject(id, &data, sizeof data);
    LOG_DEBUG("verbs: a connect request redirected to RDMA port %u (a forked child accepted "
              "its connection)", unsigned(port));
    return true;
  }
  return false;
}

void Cm::redirect_parked() noexcept {
  std::vector<rdma_cm_id*> redirected;
  {
    std::lock_guard lock(lock_);
    for (size_t i = 0; i < parked_.size();) {
      if (!redirect(parked_[i].id, parked_[i].key)) {
        ++i;
        continue;
      }
      try {
        redirected.push_back(parked_[i].id);
      } catch (...) {
        // Out of memory: its id is not destroyed (a leak, not a failure).
      }
      parked_.erase(parked_.begin() + long(i));
    }
  }
  for (rdma_cm_id* id : redirected) lib_->rdma_destroy_id(id);
}

int Cm::redirect_here(void* handle, const TcpKey& key, const char** why) noexcept {
  auto* inherited = static_cast<Listener*>(handle);
  if (!inherited->redirects || inherited->owner_bell < 0) {
    *why = "the listening process has no redirect table for its children";
    return -ENOMEM;
  }
  Listener* own;
  {
    std::lock_guard once(redirect_lock_);
    own = inherited->child_listener;
    if (!own || own->owner != getpid()) {  // (a grandchild inherits its parent's)
      stats::Endpoint any_port = inherited->local;
      any_port.port = 0;
      own = open_listener(any_port, false, why);
      if (!own) return -ENODEV;
      inherited->child_listener = own;
    }
  }
  uint16_t port = 0;
  {
    std::lock_guard lock(lock_);
    if (!own->id) {  // its device was removed
      *why = "this process's RDMA listener is gone with its device";
      return -ENODEV;
    }
    const sockaddr* bound = rdma_get_local_addr(own->id);
    port = ntohs(bound->sa_family == AF_INET6
                     ? reinterpret_cast<const sockaddr_in6*>(bound)->sin6_port
                     : reinterpret_cast<const sockaddr_in*>(bound)->sin_port);
  }
  if (port == 0 || !inherited->redirects->publish(key, port, now_ns())) {
    *why = "the redirect table of the listening process is full";
    return -EBUSY;
  }
  const uint64_t one = 1;
  (void)!real().write(inherited->owner_bell, &one, sizeof one);
  return 0;
}

bool Cm::awaited(const Listener& l) const noexcept {
  for (const Waiting& w : waiting_)
    if (w.key.local.port == l.local.port && (l.any_address || same_endpoint(w.key.local, l.local)))
      return true;
  return false;
}

size_t Cm::reap_listeners() noexcept {
  std::vector<Listener*> done;
  {
    std::lock_guard lock(lock_);
    if (closing_.empty()) return 0;
    const int64_t now = now_ns();
    for (size_t i = 0; i < closing_.size();) {
      Listener* l = closing_[i];
      if (l->held && (now < l->next_check_ns || still_held(*l))) {
        ++i;
        continue;
      }
      if (awaited(*l) && now < l->linger_until_ns) {
        ++i;
        continue;
      }
      closing_.erase(closing_.begin() + long(i));
      forget_listener(l);
      try {
        done.push_back(l);
      } catch (...) {
        // Out of memory: this one stays open (its port too); the rest go.
      }
    }
  }
  for (Listener* l : done) {
    if (l->id) lib_->rdma_destroy_id(l->id);
    free_listener(l);
  }
  return done.size();
}

bool Cm::still_held(Listener& l) noexcept {
  const char* why = "";
  const int rc = diag_.still_listening(l.local, l.tcp_cookie, &why);
  if (rc == 1) {
    l.next_check_ns = now_ns() + kHeldCheckNs;
    return true;
  }
  l.held = false;
  if (rc < 0)
    LOG_DEBUG("verbs: cannot tell whether a child still listens on port %u (%s): its RDMA "
              "listener closes", unsigned(l.local.port), why);
  else
    LOG_DEBUG("verbs: the listening socket on port %u is closed in every process: its RDMA "
              "listener closes", unsigned(l.local.port));
  return false;
}

bool Cm::release_held(uint16_t port) noexcept {
  bool any = false;
  {
    std::lock_guard lock(lock_);
    for (Listener* l : closing_) {
      if (!l->held || l->local.port != port) continue;
      l->next_check_ns = 0;  // reap_listeners asks now
      any = true;
    }
  }
  return any && reap_listeners() > 0;
}

void* Cm::listen(const stats::Endpoint& local, uint64_t tcp_cookie, const char** why) noexcept {
  Listener* l = open_listener(local, true, why);
  // The port may still be taken by a listener held for the children of an earlier socket
  // on it, closed in every process since the last check (a server that restarts its
  // listener at once).
  if (!l && *why == kPortTaken && release_held(canonical_endpoint(local).port)) {
    l = open_listener(local, true, why);
    if (l)
      LOG_DEBUG("verbs: RDMA port %u taken over from a listener held for children that no "
                "longer listen", unsigned(l->local.port));
  }
  if (l) {
    std::lock_guard lock(lock_);
    l->tcp_cookie = tcp_cookie;
  }
  return l;
}

rdma_cm_id* Cm::bind_listener(const stats::Endpoint& local, bool* any_address,
                              const char** why) noexcept {
  ReentryGuard guard;
  rdma_cm_id* id = nullptr;
  if (lib_->rdma_create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
    *why = "rdma_create_id failed";
    return nullptr;
  }
  // A loopback listener is reached through this host's RDMA address (see connect), so it
  // listens on every address, like a wildcard one.
  stats::Endpoint bind_ep = canonical_endpoint(local);
  *any_address = is_loopback(bind_ep) || is_wildcard(bind_ep);
  if (*any_address) memset(bind_ep.addr, 0, sizeof bind_ep.addr);
  sockaddr_storage addr;
  if (sockaddr_from(bind_ep, addr) == 0 ||
      lib_->rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&addr)) != 0) {
    *why = errno == EADDRINUSE ? kPortTaken : "the listening address is not on an RDMA device";
    lib_->rdma_destroy_id(id);
    return nullptr;
  }
  if (lib_->rdma_listen(id, 128) != 0) {
    *why = "rdma_listen failed";
    lib_->rdma_destroy_id(id);
    return nullptr;
  }
  return id;
}

Cm::Listener* Cm::open_listener(const stats::Endpoint& local, bool for_children,
                                const char** why) noexcept {
  bool any_address = false;
  rdma_cm_id* id = bind_listener(local, &any_address, why);
  if (!id) return nullptr;
  auto* listener = new (std::nothrow)
      Listener{this, id, getpid(), canonical_endpoint(local), any_address, 0};
  if (listener) {
    listener->for_children = for_children;
    std::lock_guard lock(lock_);
    try {
      listeners_.push_back(listener);
      return listener;
    } catch (...) {
    }
  }
  *why = "out of memory";
  free_listener(listener);
  ReentryGuard guard;
  lib_->rdma_destroy_id(id);
  return nullptr;
}

void Cm::free_listener(Listener* l) noexcept {
  if (!l) return;
  RedirectTable::destroy(l->redirects);
  if (l->owner_bell >= 0) internal_fds::close(l->owner_bell);
  delete l;
}

void Cm::unlisten(void* handle) noexcept {
  auto* listener = static_cast<Listener*>(handle);
  if (!listener) return;
  if (listener->owner != getpid()) {
    // Inherited over fork: the listener is the parent's to destroy; this process's own
    // listener for redirects, its view of the table and its copy of the bell go.
    {
      std::lock_guard inherited(inherited_lock_);
      for (int i = 0; i < inherited_count_; ++i)
        if (inherited_[i].l == listener) drop_inherited_locked(i--);
    }
    if (Listener* own = listener->child_listener; own && own->owner == getpid()) unlisten(own);
    free_listener(listener);
    return;
  }
  // Taken over from a listening process that exited (verbs_successor.cc): the listener
  // this process had opened for its redirects, while it was a child, goes too.
  if (Listener* own = listener->child_listener; own && own->owner == getpid()) {
    listener->child_listener = nullptr;
    unlisten(own);
  }
  Cm& cm = *listener->cm;
  {
    std::lock_guard lock(cm.lock_);
    // Children forked since listen() may still accept on the socket: the listener stays
    // while one does (its connect requests are theirs, redirected). First asked a check
    // period from now, well after this process's own descriptor is closed.
    const bool hold = listener->redirects && listener->diag_finds;
    if (hold || cm.awaited(*listener)) {
      try {
        listener->held = hold;
        listener->next_check_ns = now_ns() + kHeldCheckNs;
        listener->linger_until_ns = now_ns() + kLingerNs;
        cm.closing_.push_back(listener);
        if (hold)
          LOG_DEBUG("verbs: the listening socket on port %u closed here: its RDMA listener "
                    "stays while a forked child still listens", unsigned(listener->local.port));
        const uint64_t one = 1;
        (void)!real().write(cm.bell_, &one, sizeof one);  // the service times the linger
        return;
      } catch (...) {
        // Out of memory: closed now; the waiting connections stay on TCP.
      }
    }
  }
  rdma_cm_id* id;
  {
    std::lock_guard lock(cm.lock_);
    cm.forget_listener(listener);
    id = listener->id;  // null once its device was removed
  }
  ReentryGuard guard;
  if (id) cm.lib_->rdma_destroy_id(id);
  free_listener(listener);
}

bool Cm::listens_here(const void* handle) noexcept {
  return handle && static_cast<const Listener*>(handle)->owner == getpid();
}

int Cm::connect(CmClient* client, const stats::Endpoint& src, const stats::Endpoint& dst,
                rdma_cm_id** id_out, const char** why) noexcept {
  switch (channel_state_.load(std::memory_order_acquire)) {
    case Channel::open:
      return connect_now(client, src, dst, id_out, why);
    case Channel::failed:
      *why = failure_;
      return -ENODEV;
    case Channel::opening:
      break;
  }
  try {
    queued_.push_back(QueuedConnect{client, src, dst});
  } catch (...) {
    *why = "out of memory";
    return -ENOMEM;
  }
  *id_out = nullptr;
  return 0;
}

int Cm::connect_now(CmClient* client, const stats::Endpoint& src, const stats::Endpoint& dst,
                    rdma_cm_id** id_out, const char** why) noexcept {
  ReentryGuard guard;
  sockaddr_storage addr;
  // The source: the TCP connection's address, port left to the RDMA CM. Without it the
  // route would choose, and a socket bound to a secondary address before connect() would
  // claim its connection from another address, which the acceptor refuses.
  sockaddr_storage from{};
  bool have_from = false;
  if (is_loopback(dst)) {
    static sockaddr_storage local;
    static const bool have_local = local_rdma_address(*lib_, local);
    if (!have_local) {
      *why = "no RDMA device has an address to reach this host's listener";
      return -ENODEV;
    }
    addr = local;
    const uint16_t port = htons(dst.port);
    if (addr.ss_family == AF_INET)
      reinterpret_cast<sockaddr_in*>(&addr)->sin_port = port;
    else
      reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = port;
  } else if (sockaddr_from(canonical_endpoint(dst), addr) == 0) {
    *why = "not an IP destination";
    return -EAFNOSUPPORT;
  } else {
    stats::Endpoint source = canonical_endpoint(src);
    source.port = 0;
    have_from = sockaddr_from(source, from) != 0;
  }
  rdma_cm_id* id = nullptr;
  if (lib_->rdma_create_id(channel_, &id, client, RDMA_PS_TCP) != 0) {
    *why = "rdma_create_id failed";
    return -errno;
  }
  *id_out = id;
  sockaddr* from_addr = have_from ? reinterpret_cast<sockaddr*>(&from) : nullptr;
  if (lib_->rdma_resolve_addr(id, from_addr, reinterpret_cast<sockaddr*>(&addr), kResolveMs) != 0) {
    *why = "no RDMA route from the connection's address to the peer's";
    const int err = errno;
    *id_out = nullptr;
    lib_->rdma_destroy_id(id);
    return -err;
  }
  return 0;
}

void Cm::add_acceptor(CmClient* client, const TcpKey& key) noexcept {
  for (size_t i = 0; i < parked_.size(); ++i) {
    if (!same(parked_[i].key, key)) continue;
    const Parked p = parked_[i];
    parked_.erase(parked_.begin() + long(i));
    offer(client, p.id, p.data);
    return;
  }
  try {
    waiting_.push_back(Waiting{key, client});
  } catch (...) {
    client->on_failed("out of memory");
  }
}

ibv_context* Cm::own_context(ibv_context* cm_verbs, CmClient* user, uint32_t slot_bytes,
                             RecvPool** pool) noexcept {
  if (!cm_verbs) return nullptr;
  Context* found = nullptr;
  for (Context& c : contexts_)
    if (c.device == cm_verbs->device) found = &c;
  if (found && found->removed) return nullptr;
  if (!found) {
    ReentryGuard guard;
    ibv_context* context = lib_->ibv_open_device(cm_verbs->device);
    if (!context) return nullptr;
    const char* why = nullptr;
    RecvPool* p = RecvPool::create(*lib_, context, slot_bytes, &why);
    if (!p) {
      LOG_WARN("verbs: device %s: %s", cm_verbs->device->name, why);
      (void)lib_->ibv_close_device(context);
      return nullptr;
    }
    try {
      contexts_.push_back(Context{cm_verbs->device, context, p, {}, false});
    } catch (...) {
      p->destroy();
      (void)lib_->ibv_close_device(context);
      return nullptr;
    }
    internal_fds::add(context->cmd_fd);
    internal_fds::add(context->async_fd);
    // The service reads its events without blocking (the pool's limit event).
    const int fl = real().fcntl(context->async_fd, F_GETFL);
    (void)real().fcntl(context->async_fd, F_SETFL, fl | O_NONBLOCK);
    uint64_t one = 1;  // the service's poll now watches the context's events too
    (void)!real().write(bell_, &one, sizeof one);
    found = &contexts_.back();
  }
  try {
    found->users.push_back(user);
  } catch (...) {
    return nullptr;
  }
  *pool = found->pool;
  return found->context;
}

void Cm::release_context(ibv_context* context, CmClient* user) noexcept {
  for (size_t i = 0; i < contexts_.size(); ++i) {
    Context& c = contexts_[i];
    if (c.context != context) continue;
    for (size_t k = 0; k < c.users.size(); ++k)
      if (c.users[k] == user) { c.users.erase(c.users.begin() + long(k)); break; }
    if (c.users.empty() && c.removed) close_context(i);
    return;
  }
}

void Cm::close_context(size_t index) noexcept {
  ibv_context* context = contexts_[index].context;
  RecvPool* pool = contexts_[index].pool;
  contexts_.erase(contexts_.begin() + long(index));
  ReentryGuard guard;
  pool->destroy();  // no queue pair is left on its SRQ: they go before their last release
  internal_fds::remove(context->cmd_fd);
  internal_fds::remove(context->async_fd);
  (void)lib_->ibv_close_device(context);
}

void Cm::take_async_events(Context& c) noexcept {
  bool limit = false;
  ibv_async_event event;
  // Acknowledged at once: destroying a queue pair or SRQ waits for its events' acks.
  while (lib_->ibv_get_async_event(c.context, &event) == 0) {
    if (event.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && event.element.srq == c.pool->srq())
      limit = true;
    else
      LOG_DEBUG("verbs: device %s: asynchronous event %d", c.device->name,
                int(event.event_type));
    lib_->ibv_ack_async_event(&event);
  }
  if (!limit) return;
  // Re-armed first: the event fires when a slot is taken below the mark, so one taken
  // while the users copy out is still heard.
  c.pool->arm_limit();
  // The pool counts a slot as taken when a connection takes its completion: first every
  // connection takes what arrived, then the pool knows how low it is (and grows if it may).
  for (CmClient* user : c.users) user->on_pool_low(false);
  if (!c.pool->low()) return;
  LOG_DEBUG("verbs: device %s: the receive pool runs low (%u of %u slots posted): every "
            "connection copies out what it holds", c.device->name, c.pool->posted(),
            c.pool->capacity());
  for (CmClient* user : c.users) user->on_pool_low(true);
}

void Cm::forget(CmClient* client, rdma_cm_id* id) noexcept {
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (waiting_[i].client != client) continue;
    waiting_.erase(waiting_.begin() + long(i));
    break;
  }
  for (size_t i = 0; i < queued_.size(); ++i) {
    if (queued_[i].client != client) continue;
    queued_.erase(queued_.begin() + long(i));
    break;
  }
  if (id) id->context = nullptr;
}

}  // namespace fastsock::verbs
