// The vendor link of the failover chain: the Transport interface over vendors::Conn (one
// per connection, in Socket::link_state) and a listener through each usable profile's
// library per listening socket (in Socket::listen_state). Registered as `vendor`, ranked
// after verbs. docs/vendor.md.
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "endpoint.hpp"
#include "fd_budget.hpp"
#include "log.hpp"
#include "real.hpp"
#include "socket.hpp"
#include "transport_conn.hpp"
#include "vendor_conn.hpp"

namespace fastsock {

namespace {

constexpr int kVendor = int(TransportId::vendor);

// What on_listen opened: one listener per profile that could listen.
struct Listeners {
  vendors::Service* services[vendors::Conn::kMaxServices];
  void* handles[vendors::Conn::kMaxServices];
  int count;
};

// The data calls (send, recv, poll_now, ...) forward to vendors::Conn: src/transport_conn.hpp.
class VendorTransport final : public ConnTransport<VendorTransport, vendors::Conn> {
 public:
  TransportId id() const noexcept override { return TransportId::vendor; }

  int on_listen(Socket& s) noexcept override {
    auto* l = new (std::nothrow) Listeners{};
    if (!l) return -ENOMEM;
    for (size_t i = 0; i < vendors::Service::profile_count() && l->count < vendors::Conn::kMaxServices; ++i) {
      const char* why = "";
      char text[160] = {};
      if (!vendors::Service::usable(i, &why)) continue;  // no thread for a profile that cannot work
      if (vendors::Service::profile(i).rdma_cm_ports && s.listen_state[int(TransportId::verbs)]) {
        LOG_DEBUG("fd=%d vendor: no listener through profile %s: the verbs link listens on "
                  "this port in the same RDMA CM port space", s.slot->fd,
                  vendors::Service::profile(i).name.c_str());
        continue;
      }
      vendors::Service* svc = vendors::Service::get(i, &why);
      void* handle = svc ? svc->listen(s.slot->local, text, sizeof text) : nullptr;
      if (!handle) {
        LOG_DEBUG("fd=%d vendor: no listener through profile %s: %s", s.slot->fd,
                  vendors::Service::profile(i).name.c_str(), svc ? text : why);
        continue;
      }
      l->services[l->count] = svc;
      l->handles[l->count++] = handle;
    }
    if (l->count == 0) {
      delete l;
      return -ENODEV;
    }
    s.listen_state[kVendor] = l;
    return 0;
  }

  void close_listener(Socket& s) noexcept override {
    auto* l = static_cast<Listeners*>(s.listen_state[kVendor]);
    if (!l) return;
    for (int i = 0; i < l->count; ++i) vendors::Service::unlisten(l->handles[i]);
    delete l;
    s.listen_state[kVendor] = nullptr;
  }

  void prepare_connect(Socket&, const sockaddr*, socklen_t, bool) noexcept override {}

  int attach(Socket& s, Side side, Socket* listener, char* why, size_t why_len) noexcept override {
    vendors::Service* services[vendors::Conn::kMaxServices];
    int count = 0;
    if (side == Side::server) {
      auto* l = listener ? static_cast<Listeners*>(listener->listen_state[kVendor]) : nullptr;
      if (!l) {
        snprintf(why, why_len, "the listener listens through no vendor library");
        return -ENOENT;
      }
      if (!vendors::Service::listens_here(l->handles[0])) {
        snprintf(why, why_len, "the listening socket was inherited over fork: its vendor listeners are the parent's");
        return -ENOENT;
      }
      for (; count < l->count; ++count) services[count] = l->services[count];
    }
    if (!fd_budget::room_for_link(s.slot->fd)) {
      snprintf(why, why_len, "%s", fd_budget::kNoRoomReason);
      return -EMFILE;
    }
    vendors::TcpKey key{};  // as the acceptor sees it
    stats::Endpoint mine = s.slot->local;
    if (mine.family == 0) {  // not asked of the kernel yet (see ops::connect)
      sockaddr_storage addr;
      socklen_t len = sizeof addr;
      if (real().getsockname(s.slot->fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        mine = endpoint_from(reinterpret_cast<sockaddr*>(&addr), len);
    }
    key.local = side == Side::server ? mine : s.slot->peer;
    key.peer = side == Side::server ? s.slot->peer : mine;
    if (key.peer.family == 0 || key.local.family == 0) {
      snprintf(why, why_len, "the connection's addresses are unknown");
      return -ENOTCONN;
    }
    if (side == Side::client) {
      // The first usable profile that takes the family; the service tries the next ones
      // if it cannot connect.
      const int family = canonical_endpoint(key.local).family;
      const char* unusable = "no usable vendor profile takes this address family";
      for (size_t i = 0; i < vendors::Service::profile_count() && count == 0; ++i) {
        if (vendors::socket_domain(vendors::Service::profile(i), family) < 0) continue;
        const char* reason = "";
        if (!vendors::Service::usable(i, &reason)) continue;  // fastsock info says why
        if (vendors::Service* svc = vendors::Service::get(i, &reason))
          services[count++] = svc;
        else
          unusable = reason;
      }
      if (count == 0) {
        snprintf(why, why_len, "%s", unusable);
        return -ENODEV;
      }
      // A connector's later profiles are found by the service; close() forgets through
      // every service that may have it.
      for (size_t i = 0; i < vendors::Service::profile_count() && count < vendors::Conn::kMaxServices; ++i)
        if (vendors::Service* svc = vendors::Service::running(i); svc && svc != services[0])
          services[count++] = svc;
    }
    auto* c = new (std::nothrow) vendors::Conn();
    if (!c) {
      snprintf(why, why_len, "out of memory");
      return -ENOMEM;
    }
    const char* reason = "";
    const int rc = c->start(s.slot->fd, side == Side::server, key, key.local, services, count, &reason);
    if (rc < 0) {
      snprintf(why, why_len, "%s (%s)", reason, strerrordesc_np(-rc));
      c->close();
      delete c;
      return rc;
    }
    s.link_state = c;
    // Reported on tcp until a stream switches (carries_at_attach): the slot says why
    // meanwhile, after the reasons of the links skipped before this one, which
    // note_fallback gives back alone once the link carries the connection.
    c->set_skipped_reasons_len(strnlen(s.slot->reason, sizeof s.slot->reason));
    append_reason(s.slot->reason, sizeof s.slot->reason, "vendor: handshake under way");
    return 0;
  }

  bool carries_at_attach() const noexcept override { return false; }
  bool peer_shares_cpu(Socket&) noexcept override { return false; }
  void option_set(Socket&, int, int, const void*, socklen_t) noexcept override {}
  void detach(Socket& s) noexcept override {
    auto* c = static_cast<vendors::Conn*>(s.link_state);
    if (!c) return;
    c->close();
    delete c;
    s.link_state = nullptr;
  }

 private:
  friend ConnTransport;

  // The connection is reported on vendor once a direction's stream is on the link
  // (carries_at_attach), and on tcp again, with the reason, when it stays on or goes back
  // to TCP; once nothing is left on the link, its data calls go straight to the kernel.
  static void note_fallback(Socket& s) noexcept {
    vendors::Conn& c = conn(s);
    const vendors::Conn::State state = c.state();
    if (state == vendors::Conn::State::linked) {
      if (c.carried() && s.slot->transport == uint8_t(TransportId::tcp) && !c.fallback_noted()) {
        s.slot->transport = uint8_t(TransportId::vendor);
        s.slot->reason[c.skipped_reasons_len()] = '\0';
        LOG_DEBUG("fd=%d carried by vendor (%s)", s.slot->fd, c.profile_name());
      }
      return;
    }
    if (state != vendors::Conn::State::tcp && state != vendors::Conn::State::broken) return;
    if (c.settled()) s.user_io.store(false, std::memory_order_relaxed);
    if (!c.note_fallback_once()) return;  // already said
    s.slot->transport = uint8_t(TransportId::tcp);
    snprintf(s.slot->reason, sizeof s.slot->reason, "vendor: %s", c.reason());
    LOG_DEBUG("fd=%d falls back to tcp (%s)", s.slot->fd, s.slot->reason);
  }
};

// Which profiles are usable here, and why the others are not: each is probed once per
// process (vendor_probe.hpp), so the result is kept too. A connection's reason, when none
// is, stays short; `fastsock info` shows the whole list.
Probe probe_vendor() noexcept {
  static const Probe probe = [] {
    Probe p;
    const size_t n = vendors::Service::profile_count();
    for (size_t i = 0; i < n; ++i) {
      const char* why = "";
      const bool ok = vendors::Service::usable(i, &why);
      char text[300];
      snprintf(text, sizeof text, "%s: %s", vendors::Service::profile(i).name.c_str(),
               ok ? "usable" : why);
      append_reason(p.reason, sizeof p.reason, text);
      p.available |= ok;
    }
    if (n == 0) snprintf(p.reason, sizeof p.reason, "no vendor profile");
    else if (!p.available) snprintf(p.brief, sizeof p.brief, "none of its %zu profiles is usable here", n);
    return p;
  }();
  return probe;
}

constexpr TransportEntry kEntry{TransportId::vendor, 20, probe_vendor,
                                the_instance<VendorTransport>};

}  // namespace

const TransportEntry& vendor_transport_entry() noexcept { return kEntry; }

}  // namespace fastsock
