#include "api_zerocopy.hpp"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "config_load.hpp"
#include "fd_table.hpp"
#include "log.hpp"
#include "ops.hpp"
#include "real.hpp"
#include "result.hpp"

namespace fastsock::api::zerocopy {
namespace {

// Below this, pinning pages and reading a notification cost more than the copy they save
// (the kernel's msg_zerocopy.rst: "generally only effective at writes over around 10 KB").
constexpr size_t kThreshold = 64 * 1024;

size_t total_len(const msghdr* msg) {
  size_t n = 0;
  for (size_t i = 0; i < msg->msg_iovlen; ++i) n += msg->msg_iov[i].iov_len;
  return n;
}

// Could the error queue hold messages of the application's own (ICMP errors with
// IP_RECVERR/IPV6_RECVERR, transmit timestamps with SO_TIMESTAMPING)? Then reading our
// notifications could consume one of them, so zerocopy is not used for this send. Without
// those options a TCP socket's error queue only ever holds zerocopy notifications. An
// option that cannot be read counts as set.
bool app_uses_error_queue(int fd, int domain) {
  auto set = [fd](int level, int name) {
    int v = 0;
    socklen_t len = sizeof v;
    return real().getsockopt(fd, level, name, &v, &len) != 0 || v != 0;
  };
  if (set(SOL_SOCKET, SO_TIMESTAMPING)) return true;
  if (domain == AF_INET6 && set(SOL_IPV6, IPV6_RECVERR)) return true;
  return set(SOL_IP, IP_RECVERR);
}

enum State : uint8_t { untried = 0, on = 1, off = 2 };

// Reads notifications until one covers send `id` (this socket's sends are serialized by
// the caller and each waits for its own, so every earlier id is already covered). Sets
// `copied` when the kernel says it copied the data anyway. 0 or -errno.
long await_completion(int fd, uint32_t id, bool& copied) {
  for (;;) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6))];
    msghdr m{};
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const long rc = neg_errno(real().recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT));
    if (rc == -EAGAIN || rc == -EWOULDBLOCK) {
      // An error queue with a message makes the socket readable as POLLERR.
      pollfd p{fd, 0, 0};
      if (real().poll(&p, 1, -1) < 0 && errno != EINTR) return -errno;
      continue;
    }
    if (rc == -EINTR) continue;
    if (rc < 0) return rc;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      const bool recverr = (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                           (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR);
      if (!recverr || c->cmsg_len < CMSG_LEN(sizeof(sock_extended_err))) continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      if (ee.ee_errno != 0 || ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY) {
        // Excluded by app_uses_error_queue unless the application enabled an error-queue
        // option concurrently with this send; it is lost either way, so say so.
        LOG_WARN("fd %d: zerocopy: consumed a non-zerocopy error-queue message (origin %u)",
                 fd, unsigned(ee.ee_origin));
        continue;
      }
      if (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) copied = true;
      // Notifications cover ids [ee_info, ee_data], possibly coalesced; serial arithmetic
      // because the 32-bit counter wraps.
      if (int32_t(ee.ee_data - id) >= 0) return 0;
    }
  }
}

// Serializes zerocopy sends on one socket: a second concurrent sender (another thread, a
// dup'ed descriptor) sends plainly rather than read notifications meant for the first.
struct Claim {
  explicit Claim(Socket& s) : s(s), held(!s.zerocopy_busy.exchange(true)) {}
  ~Claim() {
    if (held) s.zerocopy_busy.store(false, std::memory_order_release);
  }
  Socket& s;
  const bool held;
};

}  // namespace

long sendmsg(int fd, const msghdr* msg, int flags) {
  if (!config().zerocopy || total_len(msg) < kThreshold) return ops::sendmsg(fd, msg, flags);
  SocketRef s = fd_table::lookup(fd);
  // Only a connection the kernel carries (never an shm or other user-space link).
  if (!s || s->user_io.load(std::memory_order_relaxed) ||
      s->zerocopy_state.load(std::memory_order_relaxed) == off)
    return ops::sendmsg(fd, msg, flags);
  Claim claim(*s);
  if (!claim.held || app_uses_error_queue(fd, s->domain)) return ops::sendmsg(fd, msg, flags);
  if (s->zerocopy_state.load(std::memory_order_relaxed) == untried) {
    // SO_ZEROCOPY already on means the application sends with MSG_ZEROCOPY itself: its
    // notifications would share the queue and the id counter with ours.
    int v = 0;
    socklen_t len = sizeof v;
    const bool app_owns = real().getsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &v, &len) == 0 && v;
    const int one = 1;
    const bool ok =
        !app_owns && real().setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) == 0;
    LOG_DEBUG("fd %d: zerocopy: SO_ZEROCOPY %s", fd,
              ok ? "on" : app_owns ? "already set by the application" : strerror(errno));
    s->zerocopy_state.store(ok ? on : off, std::memory_order_relaxed);
    if (!ok) return ops::sendmsg(fd, msg, flags);
  }
  const long rc = neg_errno(real().sendmsg(fd, msg, flags | MSG_ZEROCOPY));
  if (rc == -ENOBUFS) {
    // The socket's option-memory limit (optmem_max) has no room for another notification:
    // this send goes the ordinary way, later ones try again.
    LOG_DEBUG("fd %d: zerocopy: ENOBUFS, plain send of %zu bytes", fd, total_len(msg));
    return ops::sendmsg(fd, msg, flags);
  }
  if (rc <= 0) return rc;
  s->slot->bytes_sent.fetch_add(uint64_t(rc), std::memory_order_relaxed);
  bool copied = false;
  const long done = await_completion(fd, s->zerocopy_next_id++, copied);
  if (copied) {
    // The kernel's advice (msg_zerocopy.rst): when it copies anyway (loopback, a device
    // without scatter-gather or checksum offload), zerocopy only adds cost.
    s->zerocopy_state.store(off, std::memory_order_relaxed);
    LOG_DEBUG("fd %d: zerocopy: the kernel copied (SO_EE_CODE_ZEROCOPY_COPIED), off for "
              "this connection", fd);
  }
  return done < 0 ? done : rc;
}

}  // namespace fastsock::api::zerocopy
