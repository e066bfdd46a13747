#include "shm_peer_cookie.hpp"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
  // The connector's socket: its source is our peer, its destination us. The family of the
  // looked-up 4-tuple: the kernel finds an IPv6 socket connected to an IPv4(-mapped)
  // address in the same table as IPv4 ones (endpoints here are canonical).
  inet_diag_sockid id{};
  id.idiag_sport = htons(peer.port);
  id.idiag_dport = htons(local.port);
  put_address(peer, id.idiag_src);
  put_address(local, id.idiag_dst);
  id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  inet_diag_msg found;
  if (const int rc = ask(peer.family, id, &found, why); rc < 0) return rc;
  // The kernel's lookup falls back to a listening socket: only the exact 4-tuple counts.
  if (found.id.idiag_sport != htons(peer.port) || found.id.idiag_dport != htons(local.port)) {
    *why = "NETLINK_SOCK_DIAG found no such socket";
    return -ENOENT;
  }
  *cookie = uint64_t(found.id.idiag_cookie[0]) | uint64_t(found.id.idiag_cookie[1]) << 32;
  return 0;
}

int DiagSocket::still_listening(const stats::Endpoint& local, uint64_t cookie,
                                const char** why) noexcept {
  if (local.family != AF_INET && local.family != AF_INET6) {
    *why = "not an internet endpoint";
    return -EINVAL;
  }
  // Looked up as a connection arriving at `local` from nowhere: the kernel finds the
  // listener such a connection would reach and answers ESTALE when its cookie is not
  // `cookie` (another socket listens there now, or one of a SO_REUSEPORT group).
  inet_diag_sockid id{};
  id.idiag_sport = htons(local.port);
  put_address(local, id.idiag_src);
  id.idiag_cookie[0] = uint32_t(cookie);
  id.idiag_cookie[1] = uint32_t(cookie >> 32);
  inet_diag_msg found;
  const int rc = ask(local.family, id, &found, why);
  if (rc == -ENOENT || rc == -ESTALE) return 0;
  if (rc < 0) return rc;
  return found.idiag_state == TCP_LISTEN ? 1 : 0;
}

int DiagSocket::ask(int family, const inet_diag_sockid& id, inet_diag_msg* found,
                    const char** why) noexcept {
  if (const int rc = open(); rc < 0) {
    *why = "cannot open a NETLINK_SOCK_DIAG socket";
    return rc;
  }
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } request;
  memset(&request, 0, sizeof request);
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, looked up by its endpoints
  request.header.nlmsg_seq = ++seq_;
  request.request.sdiag_family = uint8_t(family);
  request.request.sdiag_protocol = IPPROTO_TCP;
  request.request.idiag_states = ~0u;
  request.request.id = id;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (real().sendto(fd_, &request, sizeof request, MSG_NOSIGNAL,
                    reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) != ssize_t(sizeof request)) {
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
      // ENOENT is also what a kernel without TCP sock_diag says (the inet_diag and
      // tcp_diag modules not loaded, nor loadable): callers tell them apart by looking up
      // a socket they know exists.
      *why = "NETLINK_SOCK_DIAG found no such socket";
      return e->error;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      *why = "unexpected NETLINK_SOCK_DIAG answer";
      return -EPROTO;
    }
    memcpy(found, NLMSG_DATA(h), sizeof *found);
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
