#include "vendor_service.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "config_load.hpp"
#include "endpoint.hpp"
#include "guard.hpp"
#include "internal_fds.hpp"
#include "link_io.hpp"
#include "log.hpp"
#include "process.hpp"
#include "real.hpp"
#include "service_thread.hpp"
#include "vendor_probe.hpp"

namespace fastsock::vendors {

namespace {

using link_io::now_ns;

// A Hello whose TCP connection is not accepted (yet), and an accepted TCP connection whose
// Hello has not come, wait this long; a connector waits as long for the Reply. The TCP
// connection carries the data meanwhile.
constexpr int64_t kHandshakeNs = 5'000'000'000;
// While something above waits, the thread looks at the clock this often.
constexpr int kTickMs = 250;

constexpr size_t kMaxProfiles = kMaxUserProfiles + 8;

// A profile's probe result (vendor_probe.hpp), worked out once per process.
struct Usability {
  std::once_flag once;
  bool ok = false;
  char why[sizeof(Lib::reason)] = {};
};

struct Profiles {
  std::vector<Profile> list;
  std::vector<std::unique_ptr<LazyLib>> libs;
  Usability usability[kMaxProfiles];
};

Profiles& profiles() noexcept {
  static Profiles* const p = [] {
    auto* out = new Profiles;
    out->list = effective_profiles(config().vendor_profiles);
    if (out->list.size() > kMaxProfiles) out->list.resize(kMaxProfiles);
    for (const Profile& pr : out->list) out->libs.push_back(std::make_unique<LazyLib>(pr));
    return out;
  }();
  return *p;
}

// The services of this process, by profile index; reset in a forked child.
std::atomic<Service*> g_services[kMaxProfiles];
std::mutex g_start_lock;  // serialises starting; held across fork

bool same_key(const TcpKey& a, const TcpKey& b) noexcept {
  return same_endpoint(a.local, b.local) && same_endpoint(a.peer, b.peer);
}

TcpKey key_of(const wire::Hello& h) noexcept {
  TcpKey k{};
  k.local.family = k.peer.family = h.family;
  k.local.port = uint16_t(wire::get_be(h.server_port, 2));
  k.peer.port = uint16_t(wire::get_be(h.client_port, 2));
  memcpy(k.local.addr, h.server_addr, 16);
  memcpy(k.peer.addr, h.client_addr, 16);
  return k;
}

// The library's socket for `ep`, bound-or-connect address in `addr`. -errno with `why`.
int library_socket(const Api& api, const Profile& p, const stats::Endpoint& ep,
                   sockaddr_storage& addr, socklen_t& addr_len, const char** why) noexcept {
  sockaddr_storage tcp;
  const socklen_t len = sockaddr_from(canonical_endpoint(ep), tcp);
  if (len == 0) {
    *why = "not an IP address";
    return -EAFNOSUPPORT;
  }
  const int domain = socket_domain(p, tcp.ss_family);
  int rc = domain < 0 ? domain
                      : translate_address(p, reinterpret_cast<sockaddr*>(&tcp), len, addr, addr_len);
  if (rc < 0) {
    *why = rc == -EAFNOSUPPORT ? "the profile does not take this address family"
                               : "the address cannot be translated";
    return rc;
  }
  const int fd = api.socket(domain, SOCK_STREAM, 0);
  if (fd < 0) {
    *why = "socket() failed";
    return -errno;
  }
  return fd;
}

}  // namespace

size_t Service::profile_count() noexcept { return profiles().list.size(); }
const Profile& Service::profile(size_t index) noexcept { return profiles().list[index]; }

bool Service::usable(size_t index, const char** why) noexcept {
  Profiles& all = profiles();
  Usability& u = all.usability[index];
  std::call_once(u.once, [&] {
    u.ok = probe_profile(all.list[index], *all.libs[index], u.why, sizeof u.why);
    if (!u.ok) LOG_DEBUG("vendor: profile %s is not usable: %s", all.list[index].name.c_str(), u.why);
  });
  *why = u.why;
  return u.ok;
}

Service* Service::get(size_t index, const char** why) noexcept {
  if (index >= profile_count()) {
    *why = "no such profile";
    return nullptr;
  }
  if (Service* s = g_services[index].load(std::memory_order_acquire)) return s;
  std::lock_guard starting(g_start_lock);
  if (Service* s = g_services[index].load(std::memory_order_acquire)) return s;
  if (!usable(index, why)) return nullptr;
  ReentryGuard guard;
  const Lib& lib = profiles().libs[index]->get();
  // Not interposed calls; registered below.
  const int bell = internal_fds::relocate(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  const int tick =
      internal_fds::relocate(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (bell < 0 || tick < 0) {
    *why = "no descriptor for the service's bell or timer";
    if (bell >= 0) close(bell);
    if (tick >= 0) close(tick);
    return nullptr;
  }
  internal_fds::add(bell);
  internal_fds::add(tick);
  auto* s = new (std::nothrow) Service(index, &lib, bell, tick);
  const int rc =
      !s ? ENOMEM
         : start_service_thread([](void* self) { static_cast<Service*>(self)->run(); }, s);
  if (rc != 0) {
    *why = "cannot start the vendor service thread";
    internal_fds::close(bell);
    internal_fds::close(tick);
    delete s;
    return nullptr;
  }
  g_services[index].store(s, std::memory_order_release);
  return s;
}

Service* Service::running(size_t index) noexcept {
  return index < kMaxProfiles ? g_services[index].load(std::memory_order_acquire) : nullptr;
}

void Service::ring() noexcept {
  if (bell_ < 0) return;  // a forked child's copy of its parent's service
  const uint64_t one = 1;
  (void)!real().write(bell_, &one, sizeof one);
}

void Service::set_nonblocking(int vfd) noexcept {
  if (!api().fcntl) return;
  const int flags = api().fcntl(vfd, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) (void)api().fcntl(vfd, F_SETFL, flags | O_NONBLOCK);
}

int Service::vendor_poll(pollfd* fds, nfds_t n, int timeout_ms) noexcept {
  // readiness=fd: every descriptor is the kernel's. readiness=poll: the library's poll,
  // which also takes kernel descriptors (the bell), as rsocket's rpoll does.
  return poll_through(api(), poll_readiness(), fds, n, timeout_ms);
}

void* Service::listen(const stats::Endpoint& local, char* why, size_t why_len) noexcept {
  ReentryGuard guard;
  sockaddr_storage addr;
  socklen_t addr_len = 0;
  const char* what = "";
  const int fd = library_socket(api(), profile(), local, addr, addr_len, &what);
  if (fd < 0) {
    snprintf(why, why_len, "%s (%s)", what, strerrordesc_np(-fd));
    return nullptr;
  }
  if (api().bind(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0 ||
      api().listen(fd, 128) != 0) {
    snprintf(why, why_len, "cannot listen through the library (%s)", strerrordesc_np(errno));
    (void)api().close(fd);
    return nullptr;
  }
  // Non-blocking where the library can say so; otherwise the thread accepts only what its
  // poll reported, which no one else takes.
  set_nonblocking(fd);
  auto* l = new (std::nothrow) Listener{this, fd, getpid()};
  std::lock_guard lock(lock_);
  try {
    if (!l) throw std::bad_alloc();
    listeners_.push_back(l);
  } catch (...) {
    snprintf(why, why_len, "out of memory");
    delete l;
    (void)api().close(fd);
    return nullptr;
  }
  ring();
  return l;
}

void Service::unlisten(void* handle) noexcept {
  auto* l = static_cast<Listener*>(handle);
  if (!l) return;
  if (l->owner != getpid()) {  // inherited over fork: the parent's to close
    delete l;
    return;
  }
  // Closed by the service thread (expire()), once no accepted connection waits for its
  // Hello any more: a server that accepts one connection and closes its listener at once
  // (fastsock-pipe, qperf's children) would otherwise refuse the connector's library
  // connect, which comes after the TCP accept. As the verbs link's listener lingers.
  Service& s = *l->service;
  std::lock_guard lock(s.lock_);
  l->closed_ns = now_ns();
  s.ring();
}

bool Service::listens_here(const void* handle) noexcept {
  return handle && static_cast<const Listener*>(handle)->owner == getpid();
}

void Service::start_connector(ServiceClient* client, const stats::Endpoint& dst,
                              const TcpKey& key, uint64_t nonce) noexcept {
  std::lock_guard lock(lock_);
  try {
    to_connect_.push_back(ToConnect{client, dst, key, nonce});
  } catch (...) {
    client->on_link_failed(int(index_), "out of memory", ENOMEM, false);
    return;
  }
  ring();
}

void Service::add_acceptor(ServiceClient* client, const TcpKey& key) noexcept {
  std::lock_guard lock(lock_);
  try {
    waiting_.push_back(Waiting{client, key, now_ns()});
  } catch (...) {
    client->on_link_failed(int(index_), "out of memory", ENOMEM, false);
    return;
  }
  ring();
}

void Service::arm(ServiceClient* client, int vfd, short events) noexcept {
  std::lock_guard lock(lock_);
  for (Armed& a : armed_) {
    if (a.client != client) continue;
    if (a.events == events) return;  // the thread watches it already
    a.events = events;
    ring();
    return;
  }
  try {
    armed_.push_back(Armed{client, vfd, events});
  } catch (...) {
    client->on_ready();  // cannot watch: let the waiter look again
    return;
  }
  ring();
}

bool Service::shutdown(int vfd, int how, bool wait) noexcept {
  if (!api().shutdown) return true;
  if (!poll_readiness()) {  // kernel descriptors: the library waits on nothing of ours
    (void)api().shutdown(vfd, how);
    return true;
  }
  std::unique_lock lock(lock_);
  if (bell_ < 0) return true;  // a forked child's copy of its parent's service
  const uint64_t ticket = ++shutdown_tickets_;
  try {
    to_shutdown_.push_back(ToShutdown{vfd, how, ticket});
  } catch (...) {
    return true;  // out of memory: the close that follows ends the vendor stream too
  }
  ring();
  if (!wait) return true;
  // Not a cancellation point: pthread_cancel would unwind through noexcept callers
  // (close() is one) and terminate the program.
  int cancel_state;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  // Queued behind the thread's other work (a slow close of another connection): up to
  // 10 s for it to take ours (the thread marks a batch started before it runs it). Then up
  // to 1 s for the library to finish it.
  if (shutdown_done_.wait_for(lock, std::chrono::seconds(10),
                              [&] { return shutdowns_started_ >= ticket; }))
    shutdown_done_.wait_for(lock, std::chrono::seconds(1), [&] { return shutdowns_done_ >= ticket; });
  pthread_setcancelstate(cancel_state, nullptr);
  return shutdowns_done_ >= ticket;
}

void Service::forget(ServiceClient* client, int vfd) noexcept {
  std::lock_guard lock(lock_);
  auto drop = [client](auto& v) {
    for (size_t i = 0; i < v.size();) {
      if (v[i].client == client)
        v.erase(v.begin() + long(i));
      else
        ++i;
    }
  };
  drop(to_connect_);
  drop(waiting_);
  drop(armed_);
  for (size_t i = 0; i < connectors_.size();) {
    if (connectors_[i].client != client) {
      ++i;
      continue;
    }
    to_close_.push_back(connectors_[i].fd);
    connectors_.erase(connectors_.begin() + long(i));
  }
  if (vfd >= 0) {
    try {
      to_close_.push_back(vfd);
    } catch (...) {
      // Out of memory: the descriptor stays open until the process ends.
    }
  }
  ring();
}

bool Service::send_all(int vfd, const void* data, size_t len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  // A fresh connection's send buffer takes a Hello or a Reply whole; a short wait covers
  // a library that makes room lazily.
  for (int tries = 0; len > 0 && tries < 100; ++tries) {
    const ssize_t n = api().send(vfd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    pollfd w{vfd, POLLOUT, 0};
    (void)vendor_poll(&w, 1, 10);
  }
  return len == 0;
}

void Service::reply(int vfd, const wire::Hello& hello, wire::Verdict verdict) noexcept {
  wire::Reply r{};
  memcpy(r.magic, wire::kReplyMagic, 4);
  r.version = wire::kVersion;
  r.verdict = uint8_t(verdict);
  memcpy(r.nonce, hello.nonce, 8);
  (void)send_all(vfd, &r, sizeof r);
}

void Service::send_hello(ServiceClient* client, int fd, const stats::Endpoint& dst,
                         const TcpKey& key, uint64_t nonce) noexcept {
  wire::Hello h{};
  memcpy(h.magic, wire::kHelloMagic, 4);
  h.version = wire::kVersion;
  h.family = uint8_t(key.local.family);
  wire::put_be(h.client_port, key.peer.port, 2);
  wire::put_be(h.server_port, key.local.port, 2);
  memcpy(h.client_addr, key.peer.addr, 16);
  memcpy(h.server_addr, key.local.addr, 16);
  wire::put_be(h.nonce, nonce, 8);
  if (!send_all(fd, &h, sizeof h)) {
    const int err = errno;
    (void)api().close(fd);
    return connector_failed(client, dst, key, nonce, "sending the Hello failed", err);
  }
  try {
    connectors_.push_back(Connector{client, fd, dst, key, nonce, {}, 0, now_ns()});
  } catch (...) {
    (void)api().close(fd);
    connector_failed(client, dst, key, nonce, "out of memory", ENOMEM);
  }
}

void Service::connector_failed(ServiceClient* client, const stats::Endpoint& dst,
                               const TcpKey& key, uint64_t nonce, const char* why,
                               int err) noexcept {
  // The next profile whose library loads and takes the address family tries next
  // (service locks are taken in profile order; fork_prepare takes them before the start
  // lock, as get() does here).
  for (size_t j = index_ + 1; j < profile_count(); ++j) {
    if (socket_domain(profile(j), canonical_endpoint(dst).family) < 0) continue;
    const char* unusable = "";
    Service* next = usable(j, &unusable) ? get(j, &unusable) : nullptr;
    if (!next) continue;  // unusable here (fastsock info), or no thread: not this one
    client->on_link_failed(int(index_), why, err, true);
    return next->start_connector(client, dst, key, nonce);
  }
  client->on_link_failed(int(index_), why, err, false);
}

void Service::accept_from(int listen_fd) noexcept {
  for (int i = 0; i < 16; ++i) {  // a burst at most; the rest on the next round
    const int fd = api().accept(listen_fd, nullptr, nullptr);
    if (fd < 0) return;
    set_nonblocking(fd);
    try {
      pending_.push_back(Pending{fd, {}, 0, now_ns()});
    } catch (...) {
      (void)api().close(fd);
      return;
    }
    if (!api().fcntl) return;  // blocking listener: only what poll reported
  }
}

void Service::read_hello(size_t i) noexcept {
  Pending& p = pending_[i];
  const ssize_t n = api().recv(p.fd, p.hello + p.got, sizeof p.hello - p.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  wire::Hello h;
  bool valid = n > 0;
  if (valid) {
    p.got = uint8_t(p.got + n);
    if (p.got < sizeof h) return;
    memcpy(&h, p.hello, sizeof h);
    valid = memcmp(h.magic, wire::kHelloMagic, 4) == 0 && h.version == wire::kVersion &&
            (h.family == AF_INET || h.family == AF_INET6);
  }
  if (!valid) {  // gone, or not a fastsock connector
    (void)api().close(p.fd);
    pending_.erase(pending_.begin() + long(i));
  }
}

void Service::read_reply(size_t i) noexcept {
  Connector& c = connectors_[i];
  const ssize_t n = api().recv(c.fd, c.reply + c.got, sizeof c.reply - c.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n > 0) {
    c.got = uint8_t(c.got + n);
    if (c.got < sizeof c.reply) return;
  }
  const Connector done = c;
  connectors_.erase(connectors_.begin() + long(i));
  const char* why = "the acceptor closed the vendor connection";
  if (n > 0) {
    wire::Reply r;
    memcpy(&r, done.reply, sizeof r);
    if (memcmp(r.magic, wire::kReplyMagic, 4) != 0 || r.version != wire::kVersion ||
        wire::get_be(r.nonce, 8) != done.nonce)
      why = "the acceptor answered for another connection";
    else if (r.verdict == uint8_t(wire::Verdict::accepted))
      return done.client->on_linked(int(index_), done.fd);
    else if (r.verdict == uint8_t(wire::Verdict::no_connection))
      why = "the acceptor found no accepted TCP connection for it";
    else
      why = "the acceptor refused (its connection moved to TCP)";
  }
  (void)api().close(done.fd);
  // A refusal is the acceptor's answer for this connection: no other profile is tried.
  done.client->on_link_failed(int(index_), why, n < 0 ? errno : 0, false);
}

void Service::match() noexcept {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    if (p.got < sizeof(wire::Hello)) {
      ++i;
      continue;
    }
    wire::Hello h;
    memcpy(&h, p.hello, sizeof h);
    const TcpKey key = key_of(h);
    size_t w = 0;
    while (w < waiting_.size() && !same_key(waiting_[w].key, key)) ++w;
    if (w == waiting_.size()) {
      ++i;  // parked until its connection is accepted
      continue;
    }
    ServiceClient* client = waiting_[w].client;
    const int fd = p.fd;
    waiting_.erase(waiting_.begin() + long(w));
    pending_.erase(pending_.begin() + long(i));
    reply(fd, h, wire::Verdict::accepted);
    client->on_linked(int(index_), fd);
  }
}

void Service::expire() noexcept {
  const int64_t now = now_ns();
  for (size_t i = 0; i < listeners_.size();) {
    Listener* l = listeners_[i];
    if (l->closed_ns == 0 || (!waiting_.empty() && now - l->closed_ns < kHandshakeNs)) {
      ++i;
      continue;
    }
    (void)api().close(l->fd);
    listeners_.erase(listeners_.begin() + long(i));
    delete l;
  }
  for (size_t i = 0; i < pending_.size();) {
    if (now - pending_[i].since_ns < kHandshakeNs) {
      ++i;
      continue;
    }
    if (pending_[i].got == sizeof(wire::Hello)) {
      wire::Hello h;
      memcpy(&h, pending_[i].hello, sizeof h);
      reply(pending_[i].fd, h, wire::Verdict::no_connection);
    }
    (void)api().close(pending_[i].fd);
    pending_.erase(pending_.begin() + long(i));
  }
  for (size_t i = 0; i < connectors_.size();) {
    if (now - connectors_[i].since_ns < kHandshakeNs) {
      ++i;
      continue;
    }
    const Connector c = connectors_[i];
    connectors_.erase(connectors_.begin() + long(i));
    (void)api().close(c.fd);
    c.client->on_link_failed(int(index_), "the acceptor did not answer in time", 0, false);
  }
  for (size_t i = 0; i < waiting_.size();) {
    if (now - waiting_[i].since_ns < kHandshakeNs) {
      ++i;
      continue;
    }
    ServiceClient* client = waiting_[i].client;
    waiting_.erase(waiting_.begin() + long(i));
    client->on_link_failed(int(index_), "the peer did not connect through the library (not under fastsock?)", 0, false);
  }
}

void Service::run() noexcept {
  ReentryGuard guard;  // everything this thread does is the library's own work
  pthread_setname_np(pthread_self(), "fastsock-vendor");
  enum Tag : uint8_t { bell, tick, listener, pending, connector, armed };
  std::vector<pollfd> fds;
  std::vector<Tag> tags;
  std::vector<int> closing;
  std::vector<ToShutdown> shutting;
  bool ticking = false;
  for (;;) {
    // Shutdowns, closes and connects first, without the lock: each can block in the
    // library (rsocket's rshutdown and rclose wait for the connection's sends to
    // complete), and application threads take the lock to arm and forget. A connection's
    // shutdown is always queued before its close.
    for (;;) {
      ToConnect t;
      {
        std::unique_lock lock(lock_);
        if (!to_shutdown_.empty()) {
          shutting.swap(to_shutdown_);
          shutdowns_started_ = shutting.back().ticket;
          shutdown_done_.notify_all();
          lock.unlock();
          for (const ToShutdown& s : shutting) (void)api().shutdown(s.fd, s.how);
          lock.lock();
          shutdowns_done_ = shutting.back().ticket;  // tickets are queued in order
          shutting.clear();
          shutdown_done_.notify_all();
          continue;
        }
        if (!to_close_.empty()) {
          closing.swap(to_close_);
          lock.unlock();
          for (int fd : closing) (void)api().close(fd);
          closing.clear();
          continue;
        }
        if (to_connect_.empty()) break;
        t = to_connect_.front();
        // Stays listed while it connects, so that forget() can cancel it.
      }
      sockaddr_storage addr;
      socklen_t addr_len = 0;
      const char* what = "";
      int fd = library_socket(api(), profile(), t.dst, addr, addr_len, &what);
      int err = fd < 0 ? -fd : 0;
      if (fd >= 0 && api().connect(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
        err = errno;
        what = "connect() failed";
        (void)api().close(fd);
        fd = -1;
      }
      std::lock_guard lock(lock_);
      bool listed = !to_connect_.empty() && to_connect_.front().client == t.client;
      if (listed) to_connect_.erase(to_connect_.begin());
      if (!listed) {
        if (fd >= 0) (void)api().close(fd);  // forgotten meanwhile
        continue;
      }
      if (fd < 0) {
        connector_failed(t.client, t.dst, t.key, t.nonce, what, err);
        continue;
      }
      set_nonblocking(fd);
      send_hello(t.client, fd, t.dst, t.key, t.nonce);
    }
    bool tick_wanted = false;
    fds.clear();
    tags.clear();
    {
      std::lock_guard lock(lock_);
      try {
        fds.push_back({bell_, POLLIN, 0});
        tags.push_back(bell);
        fds.push_back({tick_, POLLIN, 0});
        tags.push_back(tick);
        for (const Listener* l : listeners_) fds.push_back({l->fd, POLLIN, 0}), tags.push_back(listener);
        for (const Pending& p : pending_)
          if (p.got < sizeof p.hello) fds.push_back({p.fd, POLLIN, 0}), tags.push_back(pending);
        for (const Connector& c : connectors_) fds.push_back({c.fd, POLLIN, 0}), tags.push_back(connector);
        for (const Armed& a : armed_) fds.push_back({a.fd, a.events, 0}), tags.push_back(armed);
      } catch (...) {
        // Out of memory: this round watches what fitted.
      }
      tick_wanted = !pending_.empty() || !connectors_.empty() || !waiting_.empty();
      for (const Listener* l : listeners_)
        if (l->closed_ns) tick_wanted = true;  // closes once no accepted connection waits
    }
    if (tick_wanted != ticking) {
      itimerspec every{};
      if (tick_wanted) every.it_value = every.it_interval = timespec{0, kTickMs * 1'000'000L};
      ticking = timerfd_settime(tick_, 0, &every, nullptr) == 0 ? tick_wanted : ticking;
    }
    // Without a timeout (the timer above ticks instead): a finite one would be polls 1 ms
    // apart (poll_through says why).
    const int n = vendor_poll(fds.data(), nfds_t(fds.size()), -1);
    if (n < 0 && errno != EINTR) {
      const timespec pause{0, 10'000'000};  // a library that fails its poll: never spin
      nanosleep(&pause, nullptr);
    }
    std::lock_guard lock(lock_);
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      const int fd = fds[k].fd;
      switch (tags[k]) {
        case bell:
        case tick: {
          uint64_t v;
          (void)!real().read(fd, &v, sizeof v);
          break;
        }
        case listener:
          for (const Listener* l : listeners_)
            if (l->fd == fd) {
              accept_from(fd);
              break;
            }
          break;
        case pending:
          for (size_t i = 0; i < pending_.size(); ++i)
            if (pending_[i].fd == fd) {
              read_hello(i);
              break;
            }
          break;
        case connector:
          for (size_t i = 0; i < connectors_.size(); ++i)
            if (connectors_[i].fd == fd) {
              read_reply(i);
              break;
            }
          break;
        case armed:
          for (size_t i = 0; i < armed_.size(); ++i)
            if (armed_[i].fd == fd) {
              ServiceClient* client = armed_[i].client;
              armed_.erase(armed_.begin() + long(i));  // one wake-up per arming
              client->on_ready();
              break;
            }
          break;
      }
    }
    match();
    expire();
  }
}

namespace {
// The services whose locks fork_prepare took (one may start between the two steps).
Service* g_held[kMaxProfiles];
}  // namespace

void Service::fork_prepare() noexcept {
  for (size_t i = 0; i < kMaxProfiles; ++i) {
    g_held[i] = g_services[i].load(std::memory_order_acquire);
    if (g_held[i]) g_held[i]->lock_.lock();
  }
  g_start_lock.lock();
}

void Service::fork_parent() noexcept {
  g_start_lock.unlock();
  for (Service* s : g_held)
    if (s) s->lock_.unlock();
}

// The parent's services are not the child's: their threads are gone, and the library's
// descriptors are the library's business across fork (rsocket's cannot be shared). The
// old objects stay (inherited connections point at them, and only forget through them);
// the child starts its own services on first use.
void Service::fork_child() noexcept {
  g_start_lock.unlock();
  for (Service* s : g_held) {
    if (!s) continue;
    s->lock_.unlock();
    internal_fds::close(s->bell_);
    internal_fds::close(s->tick_);
    s->bell_ = s->tick_ = -1;
  }
  for (auto& s : g_services) s.store(nullptr, std::memory_order_release);
}

namespace {
const bool g_fork_registered = (register_fork_handlers(ForkHandlers{
                                    Service::fork_prepare, Service::fork_parent,
                                    Service::fork_child}),
                                true);
}  // namespace

}  // namespace fastsock::vendors
