#include "verbs_cm.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <vector>

#include "endpoint.hpp"
#include "guard.hpp"
#include "internal_fds.hpp"
#include "log.hpp"
#include "real.hpp"

namespace fastsock::verbs {

namespace {

// Resolution steps are local (ARP/neighbour and the device's routes): a few milliseconds
// on a working fabric; the TCP connection carries the data meanwhile.
constexpr int kResolveMs = 2000;
// A connect request whose TCP connection was never accepted (the application never called
// accept(), or the connector lied) is rejected after this long.
constexpr int64_t kParkedNs = 10'000'000'000;

int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// IPv4-mapped IPv6 endpoints compare as the IPv4 ones they are: a v6 socket talking to a v4
// listener sees ::ffff:a.b.c.d where the listener sees a.b.c.d.
stats::Endpoint canonical(const stats::Endpoint& ep) noexcept {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (ep.family != AF_INET6 || memcmp(ep.addr, kMapped, 12) != 0) return ep;
  stats::Endpoint v4{};
  v4.family = AF_INET;
  v4.port = ep.port;
  memcpy(v4.addr, ep.addr + 12, 4);
  return v4;
}

bool same(const stats::Endpoint& a, const stats::Endpoint& b) noexcept {
  const stats::Endpoint x = canonical(a), y = canonical(b);
  const size_t n = x.family == AF_INET ? 4 : 16;
  return x.family == y.family && x.port == y.port && memcmp(x.addr, y.addr, n) == 0;
}

bool same(const TcpKey& a, const TcpKey& b) noexcept {
  return same(a.local, b.local) && same(a.peer, b.peer);
}

bool is_loopback(const stats::Endpoint& raw) noexcept {
  const stats::Endpoint ep = canonical(raw);
  if (ep.family == AF_INET) return ep.addr[0] == 127;
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return ep.family == AF_INET6 && memcmp(ep.addr, kLoop6, 16) == 0;
}

bool is_wildcard(const stats::Endpoint& ep) noexcept {
  for (int i = 0; i < (ep.family == AF_INET ? 4 : 16); ++i)
    if (ep.addr[i]) return false;
  return true;
}

struct Parked {
  TcpKey key;
  rdma_cm_id* id;
  ConnectData data;
  int64_t since_ns;
};
struct Waiting {
  TcpKey key;
  CmClient* client;
};

// Under Cm::lock_.
std::vector<Parked> g_parked;
std::vector<Waiting> g_waiting;

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

pid_t g_owner_pid = 0;  // the process whose service g_cm is (a forked child has none)

}  // namespace

Cm* Cm::get(const char** why) noexcept {
  static std::once_flag once;
  static Cm* cm = nullptr;
  static const char* failure = nullptr;
  std::call_once(once, [] {
    ReentryGuard guard;
    const Lib* l = verbs::lib(&failure);
    if (!l) return;
    rdma_event_channel* channel = l->rdma_create_event_channel();
    if (!channel) {
      failure = "cannot open the RDMA connection manager (/dev/infiniband/rdma_cm)";
      return;
    }
    internal_fds::add(channel->fd);
    cm = new (std::nothrow) Cm(l, channel);
    if (!cm) {
      failure = "out of memory";
      return;
    }
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    // Signals are the application's business: the service thread takes none.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(
        &thread, &attr, [](void* self) -> void* {
          static_cast<Cm*>(self)->run();
          return nullptr;
        },
        cm);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      failure = "cannot start the connection-manager thread";
      cm = nullptr;
      return;
    }
    g_owner_pid = getpid();
  });
  if (cm && getpid() != g_owner_pid) {
    if (why) *why = "a forked child: the RDMA connection manager belongs to the parent";
    return nullptr;
  }
  if (!cm && why) *why = failure ? failure : "unavailable";
  return cm;
}

void Cm::run() noexcept {
  ReentryGuard guard;  // everything this thread does is the library's own work
  pthread_setname_np(pthread_self(), "fastsock-rdmacm");
  for (;;) {
    bool have_parked;
    {
      std::lock_guard lock(lock_);
      have_parked = !g_parked.empty();
    }
    pollfd p{channel_->fd, POLLIN, 0};
    const int n = real().poll(&p, 1, have_parked ? 1000 : -1);
    if (n < 0 && errno != EINTR) return;
    if (n > 0) {
      rdma_cm_event* event = nullptr;
      if (lib_->rdma_get_cm_event(channel_, &event) == 0) dispatch(event);
    }
    if (have_parked) expire_parked();
  }
}

void Cm::dispatch(rdma_cm_event* event) noexcept {
  rdma_cm_id* const id = event->id;
  rdma_cm_id* destroy_after_ack = nullptr;
  {
    std::lock_guard lock(lock_);
    auto* client = static_cast<CmClient*>(id->context);
    const char* failure = nullptr;
    switch (event->event) {
      case RDMA_CM_EVENT_CONNECT_REQUEST:
        on_connect_request(id, event->param.conn.private_data,
                           event->param.conn.private_data_len);
        if (!id->context) {
          // Rejected or parked: a parked id is in g_parked; otherwise it goes.
          bool parked = false;
          for (const Parked& p : g_parked) parked |= p.id == id;
          if (!parked) destroy_after_ack = id;
        }
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
      case RDMA_CM_EVENT_ESTABLISHED:
        if (client) client->on_established(event->param.conn.private_data,
                                           event->param.conn.private_data_len);
        break;
      case RDMA_CM_EVENT_ADDR_ERROR: failure = "no RDMA route to the peer's address"; break;
      case RDMA_CM_EVENT_ROUTE_ERROR: failure = "no RDMA route to the peer"; break;
      case RDMA_CM_EVENT_UNREACHABLE: failure = "the peer is unreachable over RDMA"; break;
      case RDMA_CM_EVENT_CONNECT_ERROR: failure = "RDMA connection error"; break;
      case RDMA_CM_EVENT_REJECTED:
        failure = "the peer has no fastsock RDMA listener (rejected)";
        break;
      case RDMA_CM_EVENT_DEVICE_REMOVAL: failure = "the RDMA device was removed"; break;
      case RDMA_CM_EVENT_DISCONNECTED:
        if (client) client->on_disconnected();
        for (size_t i = 0; i < g_parked.size(); ++i) {
          if (g_parked[i].id != id) continue;
          destroy_after_ack = id;
          g_parked.erase(g_parked.begin() + long(i));
          break;
        }
        break;
      default: break;
    }
    if (failure && client) client->on_failed(failure);
  }
  lib_->rdma_ack_cm_event(event);
  if (destroy_after_ack) lib_->rdma_destroy_id(destroy_after_ack);
}

void Cm::on_connect_request(rdma_cm_id* id, const void* raw, uint8_t len) noexcept {
  ConnectData data;
  if (!raw || len < sizeof data) {
    (void)lib_->rdma_reject(id, nullptr, 0);
    return;
  }
  memcpy(&data, raw, sizeof data);
  if (ntohs(data.magic) != kWireMagic || data.version != kWireVersion ||
      (data.family != AF_INET && data.family != AF_INET6)) {
    (void)lib_->rdma_reject(id, nullptr, 0);
    return;
  }
  const TcpKey key = key_of(data);
  for (size_t i = 0; i < g_waiting.size(); ++i) {
    if (!same(g_waiting[i].key, key)) continue;
    CmClient* client = g_waiting[i].client;
    g_waiting.erase(g_waiting.begin() + long(i));
    id->context = client;
    const char* why = "";
    if (client->on_request(id, data, &why) != 0) {
      id->context = nullptr;
      client->on_failed(why);
      (void)lib_->rdma_reject(id, nullptr, 0);
    }
    return;
  }
  // The TCP connection is not accepted yet: kept until it is (add_acceptor).
  try {
    g_parked.push_back(Parked{key, id, data, now_ns()});
  } catch (...) {
    (void)lib_->rdma_reject(id, nullptr, 0);
  }
}

void Cm::expire_parked() noexcept {
  std::vector<rdma_cm_id*> expired;
  {
    std::lock_guard lock(lock_);
    const int64_t now = now_ns();
    for (size_t i = 0; i < g_parked.size();) {
      if (now - g_parked[i].since_ns < kParkedNs) {
        ++i;
        continue;
      }
      rdma_cm_id* id = g_parked[i].id;
      g_parked.erase(g_parked.begin() + long(i));
      (void)lib_->rdma_reject(id, nullptr, 0);
      try {
        expired.push_back(id);
      } catch (...) {
      }
    }
  }
  for (rdma_cm_id* id : expired) lib_->rdma_destroy_id(id);
}

void* Cm::listen(const stats::Endpoint& local, const char** why) noexcept {
  ReentryGuard guard;
  rdma_cm_id* id = nullptr;
  if (lib_->rdma_create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
    *why = "rdma_create_id failed";
    return nullptr;
  }
  // A loopback listener is reached through this host's RDMA address (see connect), so it
  // listens on every address, like a wildcard one.
  stats::Endpoint bind_ep = canonical(local);
  if (is_loopback(bind_ep) || is_wildcard(bind_ep)) {
    memset(bind_ep.addr, 0, sizeof bind_ep.addr);
  }
  sockaddr_storage addr;
  if (sockaddr_from(bind_ep, addr) == 0 ||
      lib_->rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&addr)) != 0) {
    *why = errno == EADDRINUSE ? "the RDMA port is taken (another listener on this port)"
                               : "the listening address is not on an RDMA device";
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

void Cm::unlisten(void* handle) noexcept {
  if (handle) lib_->rdma_destroy_id(static_cast<rdma_cm_id*>(handle));
}

int Cm::connect(CmClient* client, const stats::Endpoint& dst, rdma_cm_id** id_out,
                const char** why) noexcept {
  ReentryGuard guard;
  sockaddr_storage addr;
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
  } else if (sockaddr_from(canonical(dst), addr) == 0) {
    *why = "not an IP destination";
    return -EAFNOSUPPORT;
  }
  rdma_cm_id* id = nullptr;
  if (lib_->rdma_create_id(channel_, &id, client, RDMA_PS_TCP) != 0) {
    *why = "rdma_create_id failed";
    return -errno;
  }
  *id_out = id;
  if (lib_->rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), kResolveMs) != 0) {
    *why = "no RDMA route to the peer's address";
    const int err = errno;
    *id_out = nullptr;
    lib_->rdma_destroy_id(id);
    return -err;
  }
  return 0;
}

void Cm::add_acceptor(CmClient* client, const TcpKey& key) noexcept {
  for (size_t i = 0; i < g_parked.size(); ++i) {
    if (!same(g_parked[i].key, key)) continue;
    Parked p = g_parked[i];
    g_parked.erase(g_parked.begin() + long(i));
    p.id->context = client;
    const char* why = "";
    if (client->on_request(p.id, p.data, &why) != 0) {
      p.id->context = nullptr;
      client->on_failed(why);
      (void)lib_->rdma_reject(p.id, nullptr, 0);
      lib_->rdma_destroy_id(p.id);
    }
    return;
  }
  try {
    g_waiting.push_back(Waiting{key, client});
  } catch (...) {
    client->on_failed("out of memory");
  }
}

void Cm::forget(CmClient* client, rdma_cm_id* id) noexcept {
  for (size_t i = 0; i < g_waiting.size(); ++i) {
    if (g_waiting[i].client != client) continue;
    g_waiting.erase(g_waiting.begin() + long(i));
    break;
  }
  if (id) id->context = nullptr;
}

}  // namespace fastsock::verbs
