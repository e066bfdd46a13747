// Late attach's rendezvous (shm_rendezvous_late.hpp): the name, the connector's offer and
// the acceptor's dial.
#include "shm_rendezvous_late.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "endpoint.hpp"
#include "internal_fds.hpp"
#include "real.hpp"
#include "shm_process.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"

namespace fastsock::shm {

namespace {

// "<family digit><address hex><port hex>": at most 1 + 32 + 4 characters.
void endpoint_hex(const stats::Endpoint& ep, char* out, size_t cap) noexcept {
  const size_t n = ep.family == AF_INET ? 4 : 16;
  size_t used = size_t(snprintf(out, cap, "%c", ep.family == AF_INET ? '4' : '6'));
  for (size_t i = 0; i < n && used + 2 < cap; ++i)
    used += size_t(snprintf(out + used, cap - used, "%02x", ep.addr[i]));
  snprintf(out + used, cap - used, "%04x", unsigned(ep.port));
}

}  // namespace

socklen_t late_address(const stats::Endpoint& connector, const stats::Endpoint& acceptor,
                       uid_t uid, sockaddr_un& out) noexcept {
  const stats::Endpoint c = canonical_endpoint(connector), a = canonical_endpoint(acceptor);
  if (c.family == 0 || c.family != a.family) return 0;
  char cs[40], as[40];
  endpoint_hex(c, cs, sizeof cs);
  endpoint_hex(a, as, sizeof as);
  memset(&out, 0, sizeof out);
  out.sun_family = AF_UNIX;
  const int n = snprintf(out.sun_path + 1, sizeof out.sun_path - 1, "fastsock/1/%u/late/%s-%s",
                         unsigned(uid), cs, as);
  if (n <= 0 || size_t(n) >= sizeof out.sun_path - 1) return 0;
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

namespace {

uid_t peer_uid(int fd) noexcept {
  ucred peer{};
  socklen_t len = sizeof peer;
  if (real().getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || len != sizeof peer)
    return uid_t(-1);
  return peer.uid;
}

stats::Endpoint socket_endpoint(int fd, bool peer) noexcept {
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((peer ? real().getpeername(fd, sa, &len) : real().getsockname(fd, sa, &len)) != 0)
    return stats::Endpoint{};
  return canonical_endpoint(endpoint_from(sa, len));
}

// The hello's proof: `fd` is a TCP socket connected from `acceptor` to `connector`.
bool holds_accepting_end(int fd, const stats::Endpoint& connector,
                         const stats::Endpoint& acceptor) noexcept {
  int type = 0;
  socklen_t len = sizeof type;
  if (real().getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    return false;
  return same_endpoint(socket_endpoint(fd, false), acceptor) &&
         same_endpoint(socket_endpoint(fd, true), connector);
}

// The name of the connection for `uid` (in `addr`, `len`) and a socket to bind or connect
// to it. The socket, or -errno with `why`.
int late_socket(const stats::Endpoint& connector, const stats::Endpoint& acceptor, uid_t uid,
                sockaddr_un& addr, socklen_t& len, const char** why) noexcept {
  len = late_address(connector, acceptor, uid, addr);
  if (len == 0) {
    *why = "the connection's endpoints are not IPv4/IPv6";
    return -EINVAL;
  }
  const int fd =
      internal_fds::take(real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd < 0) {
    *why = "cannot create a rendezvous socket";
    return -errno;
  }
  return fd;
}

}  // namespace

int LateOffer::open(const stats::Endpoint& connector, const stats::Endpoint& acceptor,
                    const char** why) noexcept {
  close();
  sockaddr_un addr;
  socklen_t len;
  const int fd = late_socket(connector, acceptor, effective_uid(), addr, len, why);
  if (fd < 0) return fd;
  connector_ = canonical_endpoint(connector);
  acceptor_ = canonical_endpoint(acceptor);
  if (real().bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 ||
      real().listen(fd, 1) != 0) {
    const int err = -errno;
    internal_fds::close(fd);
    *why = err == -EADDRINUSE ? "the late-attach name is taken" : "cannot listen for a late attach";
    return err;
  }
  listen_fd_ = fd;
  return 0;
}

int LateOffer::open(int tcp_fd, const char** why) noexcept {
  return open(socket_endpoint(tcp_fd, false), socket_endpoint(tcp_fd, true), why);
}

bool LateOffer::take(Handshake& out, const char** why) noexcept {
  if (listen_fd_ < 0) return false;
  if (channel_fd_ < 0) {
    const int fd = internal_fds::take(real().accept4(listen_fd_, nullptr, nullptr,
                                                     SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd < 0) return false;  // (EAGAIN: nobody dialled yet)
    channel_fd_ = fd;
  }
  HelloWire wire;
  Received r;
  recv_message(channel_fd_, &wire, sizeof wire, r);
  if (r.len == -EAGAIN) return false;  // its hello follows its connect at once
  Hello h;
  WireError err = r.len > 0 ? decode_hello(&wire, size_t(r.len), r.truncated, h)
                            : "the late dialer left before its hello";
  if (!err) err = check_control(r.control, h.fd_count, r.ctrunc);
  if (!err && (h.slot_op != SlotOp::unpooled || h.fd_count != kLateHelloFds))
    err = "a late hello carries a segment of its own and the accepting socket";
  if (!err && !holds_accepting_end(r.control.fds[2], connector_, acceptor_))
    err = "the late dialer does not hold the accepting end of this connection";
  if (err) {
    if (r.len > 0) close_fds(r.control.fds, r.control.fd_count);
    internal_fds::close(channel_fd_);
    channel_fd_ = -1;
    *why = err;
    return false;
  }
  out = Handshake();
  out.fd_ = channel_fd_;
  out.hello_ = h;
  out.fds_.adopt(r.control.fds, r.control.fd_count);
  channel_fd_ = -1;
  close();
  return true;
}

void LateOffer::close() noexcept {
  if (channel_fd_ >= 0) internal_fds::close(channel_fd_);
  if (listen_fd_ >= 0) internal_fds::close(listen_fd_);
  channel_fd_ = listen_fd_ = -1;
}

int late_dial(const stats::Endpoint& connector, const stats::Endpoint& acceptor,
              uid_t record_uid, const char** why) noexcept {
  sockaddr_un addr;
  socklen_t len;
  const int fd = late_socket(connector, acceptor, record_uid, addr, len, why);
  if (fd < 0) return fd;
  if (real().connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int err = -errno;
    internal_fds::close(fd);
    *why = "no late-attach offer from the connector";
    return err == -ENOENT || err == -EAGAIN ? -ECONNREFUSED : err;
  }
  if (const uid_t uid = peer_uid(fd); uid != record_uid && uid != effective_uid()) {
    internal_fds::close(fd);
    *why = "the late-attach offer belongs to another uid";
    return -EPERM;
  }
  return fd;
}

}  // namespace fastsock::shm
