// Which socket is at the other end of an accepted loopback connection: the kernel's socket
// cookie of the connector's socket, asked from NETLINK_SOCK_DIAG (what `ss` uses) by the
// connection's 4-tuple. The connector puts its own socket's cookie (SO_COOKIE) in the hello
// it sends BEFORE its SYN, so the acceptor can tell which hello is this connection's as soon
// as accept() returns, without waiting for a message sent after the connect
// (docs/shm-rendezvous.md, "Which hello is this connection's").
#pragma once

#include <linux/inet_diag.h>

#include <cstdint>

#include "stats_layout.hpp"

namespace fastsock::shm {

// The cookie of this process's socket `fd` (SO_COOKIE); 0 when the kernel does not say.
uint64_t socket_cookie(int fd) noexcept;

// A NETLINK_SOCK_DIAG socket kept by its owner (one per Listener: replies must not be mixed
// up between threads, and a forked child makes its own).
class DiagSocket {
 public:
  DiagSocket() noexcept = default;
  DiagSocket(const DiagSocket&) = delete;
  DiagSocket& operator=(const DiagSocket&) = delete;
  ~DiagSocket() { close(); }

  // The cookie of the socket whose local endpoint is `peer` and whose remote endpoint is
  // `local` (the other end of a connection accepted from `peer` on `local`), in this
  // network namespace. 0 with *cookie set; -ENOENT when no such socket exists (it closed
  // already, or the peer is on another host); other -errno with `why` when the kernel cannot
  // answer (no sock_diag for TCP in this kernel).
  int peer_cookie(const stats::Endpoint& peer, const stats::Endpoint& local, uint64_t* cookie,
                  const char** why) noexcept;

  // Whether the listening socket whose cookie is `cookie`, bound to `local`, still listens
  // in some process of this network namespace (a forked child holds it after its parent
  // closed its descriptor): 1 yes; 0 no (closed everywhere, or another socket listens there
  // now); -errno with `why` when the kernel cannot answer. A kernel without TCP sock_diag
  // answers 0 too: ask first about a socket known to listen.
  int still_listening(const stats::Endpoint& local, uint64_t cookie, const char** why) noexcept;

  // Opens the netlink socket now (peer_cookie() does when needed). 0 or -errno.
  int open() noexcept;
  // (A forked child closes its copy before its first lookup: the parent's replies must
  // not reach it.)
  void close() noexcept;

 private:
  // One SOCK_DIAG_BY_FAMILY request for the TCP socket `id` names; its answer in *found.
  // -errno with `why`: -ENOENT no such socket, -ESTALE one with another cookie.
  int ask(int family, const inet_diag_sockid& id, inet_diag_msg* found, const char** why) noexcept;

  int fd_ = -1;
  uint32_t seq_ = 0;
};

}  // namespace fastsock::shm
