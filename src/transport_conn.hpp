// The data calls of a link that keeps one object per connection in Socket::link_state
// (shm::Conn, verbs::Conn) and carries the data itself: each forwards to that object, and
// the ones after which the connection may have fallen back to TCP (send, recv, poll_now,
// downgrade) then let the link record it.
//
// A link derives as `class XTransport final : public ConnTransport<XTransport, x::Conn>`
// and provides `static void note_fallback(Socket&) noexcept` (private, with
// `friend ConnTransport;`). What differs between links (listening, attaching, options,
// peer_shares_cpu, detach) stays in the link's own class.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdio>
#include <cstring>

#include "socket.hpp"
#include "transport.hpp"

namespace fastsock {

// For Transport::option_set: true when the option is SO_LINGER, with `abortive` set to
// whether it is {1, 0}. The kernel resets the connection at such a close, and the peer
// must see that reset (ECONNRESET), not the orderly end a link would deliver first.
inline bool abortive_linger(int level, int name, const void* value, socklen_t len,
                            bool* abortive) noexcept {
  if (level != SOL_SOCKET || name != SO_LINGER || len < socklen_t(sizeof(linger))) return false;
  const auto* lg = static_cast<const linger*>(value);
  *abortive = lg->l_onoff && lg->l_linger == 0;
  return true;
}

// Appends "; " and `text` to `out` (one line of reasons, as a stats slot's).
inline void append_reason(char* out, size_t len, const char* text) noexcept {
  const size_t used = strnlen(out, len);
  if (used + 1 < len) snprintf(out + used, len - used, "%s%s", used ? "; " : "", text);
}

template <typename Derived, typename Conn>
class ConnTransport : public Transport {
 public:
  bool kernel_carries_data() const noexcept override { return false; }

  ssize_t send(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) override {
    const ssize_t rc = conn(s).send(fd, iov, iovcnt, flags);
    Derived::note_fallback(s);
    return rc;
  }
  ssize_t recv(Socket& s, int fd, const iovec* iov, int iovcnt, int flags) override {
    const ssize_t rc = conn(s).recv(fd, iov, iovcnt, flags);
    Derived::note_fallback(s);
    return rc;
  }
  long bytes_readable(Socket& s, int fd) noexcept override { return conn(s).bytes_readable(fd); }
  short poll_now(Socket& s, int fd, short events) noexcept override {
    const short rev = conn(s).poll_now(fd, events);
    Derived::note_fallback(s);
    return rev;
  }
  int wait_fds(Socket& s, int fd, short events, pollfd* out) noexcept override {
    return conn(s).wait_fds(fd, events, out);
  }
  void disarm(Socket& s, WakeWatch watch) noexcept override { conn(s).after_wait(watch == WakeWatch::edge); }
  void downgrade(Socket& s, int fd, const char* why) noexcept override {
    if (!s.link_state) return;
    conn(s).downgrade(fd, why);
    Derived::note_fallback(s);
  }
  int shutdown(Socket& s, int fd, int how) noexcept override { return conn(s).shutdown(fd, how); }
  void refresh_report(Socket& s) noexcept override {
    if (s.link_state) Derived::note_fallback(s);
  }

 protected:
  // The connection's object (only for a socket this link carries).
  static Conn& conn(Socket& s) noexcept { return *static_cast<Conn*>(s.link_state); }
};

}  // namespace fastsock
