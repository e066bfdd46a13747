#include "shm_rendezvous_wire.hpp"

#include <netinet/in.h>

#include <cstring>

#include "shm_rendezvous_name.hpp"

namespace fastsock::shm {

static_assert((kControlBytes - CMSG_LEN(0)) / sizeof(int) <= size_t(kControlFdCap),
              "every descriptor the control buffer can hold must be collected (and closed)");

namespace {

bool zero_bytes(const uint8_t* p, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

// A connector endpoint: a real address family and port. Unused address bytes of an IPv4
// endpoint must be zero, so that one endpoint has one encoding.
WireError check_endpoint(const stats::Endpoint& ep) noexcept {
  if (ep.family == AF_INET) {
    if (!zero_bytes(ep.addr + 4, 12)) return "IPv4 endpoint with stray address bytes";
  } else if (ep.family != AF_INET6) {
    return "endpoint of unknown family";
  }
  if (ep.port == 0) return "endpoint without a port";
  return nullptr;
}

bool printable(char c) noexcept { return c >= 0x20 && c < 0x7f; }

}  // namespace

WireError decode_hello(const void* buf, size_t len, bool truncated, Hello& out) noexcept {
  if (truncated || len != sizeof(HelloWire)) return "hello of the wrong size";
  HelloWire w;
  memcpy(&w, buf, sizeof w);
  if (w.magic != kWireMagic) return "hello with a wrong magic";
  if (w.version != kWireVersion) return "hello of an unknown version";
  if (w.size != sizeof(HelloWire) || w.kind != kKindHello) return "not a hello";
  if (w.fd_count > kMaxPassedFds) return "hello announces too many descriptors";
  if (w.server_port == 0) return "hello without a server port";
  if (w.pid <= 0) return "hello with an invalid pid";
  if (w.reserved != 0) return "hello with reserved bytes set";
  if (w.slot_op > kMaxSlotOp) return "hello with an unknown slot operation";
  if (w.slot >= kPoolSlots || (w.slot_op == uint8_t(SlotOp::unpooled) && w.slot != 0))
    return "hello with an invalid slot";
  if (w.slot_op == uint8_t(SlotOp::reuse) && w.fd_count != 0)
    return "hello reusing a slot with descriptors";
  if (w.cookie == 0) return "hello without a socket cookie";
  if (!zero_bytes(w.reserved_cookie, sizeof w.reserved_cookie))
    return "hello with reserved bytes set";
  out.pid = w.pid;
  out.nonce = w.nonce;
  out.cookie = w.cookie;
  out.server_port = w.server_port;
  out.fd_count = w.fd_count;
  out.slot_op = SlotOp(w.slot_op);
  out.slot = w.slot;
  return nullptr;
}

WireError decode_reply(const void* buf, size_t len, bool truncated, Reply& out) noexcept {
  if (truncated || len != sizeof(ReplyWire)) return "reply of the wrong size";
  ReplyWire w;
  memcpy(&w, buf, sizeof w);
  if (w.magic != kWireMagic) return "reply with a wrong magic";
  if (w.version != kWireVersion) return "reply of an unknown version";
  if (w.size != sizeof(ReplyWire) || w.kind != kKindReply) return "not a reply";
  if (w.pid <= 0) return "reply with an invalid pid";
  if (w.reason_len >= kReasonMax) return "reply with an oversized reason";
  if (!zero_bytes(reinterpret_cast<const uint8_t*>(w.reason) + w.reason_len,
                  kReasonMax - w.reason_len))
    return "reply with bytes after its reason";
  // The reason ends up in logs and stats: printable ASCII only.
  for (size_t i = 0; i < w.reason_len; ++i)
    if (!printable(w.reason[i])) return "reply with an unprintable reason";
  if (w.status == kReplyAccepted) {
    if (w.fd_count > kMaxPassedFds) return "reply announces too many descriptors";
    if (w.reason_len != 0) return "accepting reply with a reason";
  } else if (w.status == kReplyRejected) {
    if (w.fd_count != 0) return "rejecting reply with descriptors";
  } else {
    return "reply with an unknown status";
  }
  out.accepted = w.status == kReplyAccepted;
  out.pid = w.pid;
  out.nonce = w.nonce;
  out.fd_count = w.fd_count;
  memcpy(out.reason, w.reason, w.reason_len);
  out.reason[w.reason_len] = '\0';
  return nullptr;
}

WireError decode_where(const void* buf, size_t len, bool truncated, Where& out) noexcept {
  if (truncated || len != sizeof(WhereWire)) return "where of the wrong size";
  WhereWire w;
  memcpy(&w, buf, sizeof w);
  if (w.magic != kWireMagic) return "where with a wrong magic";
  if (w.version != kWireVersion) return "where of an unknown version";
  if (w.size != sizeof(WhereWire) || w.kind != kKindWhere) return "not a where";
  if (!zero_bytes(w.reserved, sizeof w.reserved) || !zero_bytes(w.reserved_end, sizeof w.reserved_end))
    return "where with reserved bytes set";
  if (w.cookie == 0) return "where without a socket cookie";
  if (WireError e = check_endpoint(w.connector)) return e;
  out.cookie = w.cookie;
  out.connector = canonical_endpoint(w.connector);
  return nullptr;
}

WhereWire encode_where(const Where& in) noexcept {
  WhereWire w;
  memset(&w, 0, sizeof w);
  w.magic = kWireMagic;
  w.version = kWireVersion;
  w.size = sizeof w;
  w.kind = kKindWhere;
  w.cookie = in.cookie;
  w.connector = canonical_endpoint(in.connector);
  return w;
}

WireError decode_withdraw(const void* buf, size_t len, bool truncated, Withdraw& out) noexcept {
  if (truncated || len != sizeof(WithdrawWire)) return "withdraw of the wrong size";
  WithdrawWire w;
  memcpy(&w, buf, sizeof w);
  if (w.magic != kWireMagic) return "withdraw with a wrong magic";
  if (w.version != kWireVersion) return "withdraw of an unknown version";
  if (w.size != sizeof(WithdrawWire) || w.kind != kKindWithdraw) return "not a withdraw";
  if (!zero_bytes(w.reserved, sizeof w.reserved)) return "withdraw with reserved bytes set";
  if (w.cookie == 0) return "withdraw without a socket cookie";
  out.nonce = w.nonce;
  out.cookie = w.cookie;
  return nullptr;
}

WithdrawWire encode_withdraw(const Withdraw& in) noexcept {
  WithdrawWire w;
  memset(&w, 0, sizeof w);
  w.magic = kWireMagic;
  w.version = kWireVersion;
  w.size = sizeof w;
  w.kind = kKindWithdraw;
  w.nonce = in.nonce;
  w.cookie = in.cookie;
  return w;
}

HelloWire encode_hello(const Hello& h) noexcept {
  HelloWire w;
  memset(&w, 0, sizeof w);
  w.magic = kWireMagic;
  w.version = kWireVersion;
  w.size = sizeof w;
  w.kind = kKindHello;
  w.fd_count = h.fd_count;
  w.server_port = h.server_port;
  w.pid = h.pid;
  w.nonce = h.nonce;
  w.cookie = h.cookie;
  w.slot = h.slot;
  w.slot_op = uint8_t(h.slot_op);
  return w;
}

ReplyWire encode_reply(bool accepted, int32_t pid, uint64_t nonce, uint8_t fd_count,
                       const char* reason) noexcept {
  ReplyWire w;
  memset(&w, 0, sizeof w);
  w.magic = kWireMagic;
  w.version = kWireVersion;
  w.size = sizeof w;
  w.kind = kKindReply;
  w.status = accepted ? kReplyAccepted : kReplyRejected;
  w.fd_count = accepted ? fd_count : 0;
  w.pid = pid;
  w.nonce = nonce;
  if (!accepted && reason) {
    const size_t n = strnlen(reason, kReasonMax - 1);
    for (size_t i = 0; i < n; ++i) w.reason[i] = printable(reason[i]) ? reason[i] : '?';
    w.reason_len = uint8_t(n);
  }
  return w;
}

void parse_control(const msghdr& msg, ControlData& out) noexcept {
  out = ControlData{};
  // CMSG_NXTHDR checks each header against msg_controllen; a header whose length runs past
  // the buffer ends the walk.
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(const_cast<msghdr*>(&msg),
                                                                   const_cast<cmsghdr*>(c))) {
    const size_t space = static_cast<size_t>(
        static_cast<const char*>(msg.msg_control) + msg.msg_controllen -
        reinterpret_cast<const char*>(c));
    if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_len > space) {
      out.unexpected = true;
      break;
    }
    const size_t data_len = c->cmsg_len - CMSG_LEN(0);
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t n = data_len / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (out.fd_count == kControlFdCap) {
          out.unexpected = true;  // cannot happen with a kControlBytes buffer
          break;
        }
        out.fds[out.fd_count++] = fd;
      }
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
               data_len == sizeof(struct ucred) && !out.has_creds) {
      memcpy(&out.creds, CMSG_DATA(c), sizeof out.creds);
      out.has_creds = true;
    } else {
      out.unexpected = true;
    }
  }
}

WireError check_control(const ControlData& c, int expected_fds, bool ctrunc) noexcept {
  if (ctrunc) return "more descriptors or control data than announced";
  if (c.unexpected) return "unexpected control data";
  if (c.fd_count != expected_fds) return "descriptor count differs from the announced one";
  return nullptr;
}

}  // namespace fastsock::shm
