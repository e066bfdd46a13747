#include "shm_peer_cookie.hpp"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "internal_fds.hpp"
#include "real.hpp"

namespace fastsock::shm {

uint64_t socket_cookie(int fd) noexcept {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (real().getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 || len != sizeof cookie)
    return 0;
  return cookie;
}

namespace {

// inet_diag_sockid addresses: an IPv4 address in the first word, an IPv6 one in all four.
void put_address(const stats::Endpoint& ep, __be32 out[4]) noexcept {
  memset(out, 0, 16);
  memcpy(out, ep.addr, ep.family == AF_INET ? 4 : 16);
}

}  // namespace

int DiagSocket::peer_cookie(const stats::Endpoint& peer, const stats::Endpoint& local,
                            uint64_t* cookie, const char** why) noexcept {
  if (peer.family != local.family || (peer.family != AF_INET && peer.family != AF_INET6)) {
    *why = "peer and local endpoints of different families";
    return -EINVAL;
  }
  if (const int rc = open(); rc < 0) {
    *why = "cannot open a NETLINK_SOCK_DIAG socket";
    return rc;
  }
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } ask;
  memset(&ask, 0, sizeof ask);
  ask.header.nlmsg_len = sizeof ask;
  ask.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, looked up by its 4-tuple
  ask.header.nlmsg_seq = ++seq_;
  // The family of the looked-up 4-tuple: the kernel finds an IPv6 socket connected to an
  // IPv4(-mapped) address in the same table as IPv4 ones (endpoints here are canonical).
  ask.request.sdiag_family = uint8_t(peer.family);
  ask.request.sdiag_protocol = IPPROTO_TCP;
  ask.request.idiag_states = ~0u;
  // The connector's socket: its source is our peer, its destination us.
  ask.request.id.idiag_sport = htons(peer.port);
  ask.request.id.idiag_dport = htons(local.port);
  put_address(peer, ask.request.id.idiag_src);
  put_address(local, ask.request.id.idiag_dst);
  ask.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  ask.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (real().sendto(fd_, &ask, sizeof ask, MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&kernel),
                    sizeof kernel) != ssize_t(sizeof ask)) {
    *why = "cannot ask NETLINK_SOCK_DIAG";
    return -errno;
  }
  // The kernel answers within the sendto: the reply is already queued. Replies to earlier
  // requests that were abandoned (a signal) carry another sequence number and are skipped.
  for (;;) {
    alignas(nlmsghdr) char buf[512];
    sockaddr_nl from{};
    socklen_t from_len = sizeof from;
    const ssize_t n = real().recvfrom(fd_, buf, sizeof buf, MSG_DONTWAIT,
                                      reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) {
      if (errno == EINTR) continue;
      *why = "no answer from NETLINK_SOCK_DIAG";
      return -errno;
    }
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (from.nl_pid != 0 || size_t(n) < sizeof *h || !NLMSG_OK(h, size_t(n))) continue;
    if (h->nlmsg_seq != seq_) continue;
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e) || e->error >= 0) {
        *why = "malformed NETLINK_SOCK_DIAG error";
        return -EPROTO;
      }
      // ENOENT is also what a kernel without TCP sock_diag says; the caller tells them
      // apart by looking up a socket it knows exists (Listener::identify()).
      *why = "NETLINK_SOCK_DIAG found no such socket";
      return e->error;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      *why = "unexpected NETLINK_SOCK_DIAG answer";
      return -EPROTO;
    }
    const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    // The kernel's lookup falls back to a listening socket: only the exact 4-tuple counts.
    if (m->id.idiag_sport != htons(peer.port) || m->id.idiag_dport != htons(local.port)) {
      *why = "NETLINK_SOCK_DIAG found no such socket";
      return -ENOENT;
    }
    *cookie = uint64_t(m->id.idiag_cookie[0]) | uint64_t(m->id.idiag_cookie[1]) << 32;
    return 0;
  }
}

int DiagSocket::open() noexcept {
  if (fd_ >= 0) return 0;
  fd_ = internal_fds::take(real().socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd_ < 0) return -errno;
  return 0;
}

void DiagSocket::close() noexcept {
  if (fd_ >= 0) internal_fds::close(fd_);
  fd_ = -1;
}

}  // namespace fastsock::shm
