// The four messages of the rendezvous (hello, where and withdraw: connector -> acceptor;
// reply: acceptor -> connector) and the parsing of what arrives with them. Both ends are on one host, so
// fields are in host byte order; every message is one SOCK_SEQPACKET record of exactly
// its size. Everything here treats its input as untrusted (a libFuzzer target drives it).
//
// Byte layouts (offsets in bytes) are static_assert'ed below and drawn in
// docs/shm-rendezvous.md.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "stats_layout.hpp"

namespace fastsock::shm {

inline constexpr uint32_t kWireMagic = 0x56525346;  // "FSRV" in memory on little-endian
// Version 2: a channel carries many handshakes, each announced by an intent before the SYN.
// Version 3: the hello names a pooled segment (slot and operation, shm_pool.hpp).
// Version 4: the hello is sent before the SYN (it replaces version 2's intent), naming the
// connector's socket by its kernel cookie; the connector's local endpoint (known only after
// the connect) follows in a `where` message.
// Version 5: an accepted reuse of a pooled slot gets no reply message: the acceptor's
// confirmation in the slot's segment is the answer (the connector then gives the channel
// back itself). Fresh and unpooled segments, and every rejection, are answered as before.
// Version 6: a connector whose connection another process accepted (a listener shared after
// fork) withdraws its unanswered hello, and the channel serves the next connection.
inline constexpr uint16_t kWireVersion = 6;
inline constexpr uint8_t kKindHello = 1;
inline constexpr uint8_t kKindReply = 2;
inline constexpr uint8_t kKindWhere = 4;  // (3 was version 2-3's intent)
inline constexpr uint8_t kKindWithdraw = 5;

// Pooled segments (shm_pool.hpp): slots per channel, and what a hello does with its slot.
inline constexpr int kPoolSlots = 16;
enum class SlotOp : uint8_t {
  unpooled = 0,  // a segment of its own (memfd + eventfd attached), not kept afterwards
  fresh = 1,     // a new segment for `slot` (memfd + eventfd attached); both ends keep it
  reuse = 2,     // the segment both ends keep in `slot`; no descriptors either way
};
inline constexpr uint8_t kMaxSlotOp = uint8_t(SlotOp::reuse);

// Descriptors either message may carry (the caller decides which: e.g. the connector's
// segment memfd and eventfd, the acceptor's eventfd).
inline constexpr int kMaxPassedFds = 4;

struct HelloWire {
  uint32_t magic;               // kWireMagic
  uint16_t version;             // kWireVersion
  uint16_t size;                // sizeof(HelloWire)
  uint8_t kind;                 // kKindHello
  uint8_t fd_count;             // descriptors attached with SCM_RIGHTS, <= kMaxPassedFds
  uint16_t server_port;         // the port the connector dialled (= the listener's)
  int32_t pid;                  // the connector's pid (checked against SCM_CREDENTIALS)
  uint64_t nonce;               // random, echoed by the reply
  uint64_t cookie;              // the connector's TCP socket (SO_COOKIE), never 0
  uint8_t reserved_cookie[12];  // zero
  uint16_t slot;                // pooled segment: its slot in the channel's pool (< kPoolSlots)
  uint8_t slot_op;              // SlotOp: unpooled (slot 0), fresh or reuse (no descriptors)
  uint8_t reserved;             // zero
};
static_assert(sizeof(HelloWire) == 48);
static_assert(offsetof(HelloWire, size) == 6);
static_assert(offsetof(HelloWire, kind) == 8);
static_assert(offsetof(HelloWire, fd_count) == 9);
static_assert(offsetof(HelloWire, server_port) == 10);
static_assert(offsetof(HelloWire, pid) == 12);
static_assert(offsetof(HelloWire, nonce) == 16);
static_assert(offsetof(HelloWire, cookie) == 24);
static_assert(offsetof(HelloWire, reserved_cookie) == 32);
static_assert(offsetof(HelloWire, slot) == 44);
static_assert(offsetof(HelloWire, slot_op) == 46);
static_assert(offsetof(HelloWire, reserved) == 47);

// Sent after the TCP connect: the local endpoint of the socket the hello named. With it the
// acceptor matches by the accepted connection's peer address alone; an acceptor that
// accepted before it came asks sock_diag for the peer's cookie instead (shm_peer_cookie.hpp).
struct WhereWire {
  uint32_t magic;               // kWireMagic
  uint16_t version;             // kWireVersion
  uint16_t size;                // sizeof(WhereWire)
  uint8_t kind;                 // kKindWhere
  uint8_t reserved[7];          // zero
  uint64_t cookie;              // the hello's
  stats::Endpoint connector;    // the connector's local TCP endpoint = the acceptor's peer
  uint8_t reserved_end[4];      // zero
};
static_assert(sizeof(WhereWire) == 48);
static_assert(offsetof(WhereWire, kind) == 8);
static_assert(offsetof(WhereWire, cookie) == 16);
static_assert(offsetof(WhereWire, connector) == 24);
static_assert(offsetof(WhereWire, reserved_end) == 44);

// Sent instead of closing the channel when the connector learnt that its hello will never be
// answered: the acceptor's bytes came on TCP first, so another process (a sibling sharing
// the listener after fork) accepted the connection. The holder drops the hello and its
// descriptors; the channel, and the pool slot the hello named, serve the next connection.
struct WithdrawWire {
  uint32_t magic;               // kWireMagic
  uint16_t version;             // kWireVersion
  uint16_t size;                // sizeof(WithdrawWire)
  uint8_t kind;                 // kKindWithdraw
  uint8_t reserved[7];          // zero
  uint64_t nonce;               // the hello's
  uint64_t cookie;              // the hello's
};
static_assert(sizeof(WithdrawWire) == 32);
static_assert(offsetof(WithdrawWire, kind) == 8);
static_assert(offsetof(WithdrawWire, nonce) == 16);
static_assert(offsetof(WithdrawWire, cookie) == 24);

inline constexpr uint8_t kReplyAccepted = 1;
inline constexpr uint8_t kReplyRejected = 2;
inline constexpr size_t kReasonMax = 104;

struct ReplyWire {
  uint32_t magic;               // kWireMagic
  uint16_t version;             // kWireVersion
  uint16_t size;                // sizeof(ReplyWire)
  uint8_t kind;                 // kKindReply
  uint8_t status;               // kReplyAccepted / kReplyRejected
  uint8_t fd_count;             // descriptors attached; 0 when rejected
  uint8_t reason_len;           // bytes of `reason` used (< kReasonMax), rejected only
  int32_t pid;                  // the acceptor's pid
  uint64_t nonce;               // the hello's nonce
  char reason[kReasonMax];      // why rejected: printable ASCII, zero-padded
};
static_assert(sizeof(ReplyWire) == 128);
static_assert(offsetof(ReplyWire, kind) == 8);
static_assert(offsetof(ReplyWire, status) == 9);
static_assert(offsetof(ReplyWire, fd_count) == 10);
static_assert(offsetof(ReplyWire, reason_len) == 11);
static_assert(offsetof(ReplyWire, pid) == 12);
static_assert(offsetof(ReplyWire, nonce) == 16);
static_assert(offsetof(ReplyWire, reason) == 24);

// What a hello says, once checked.
struct Hello {
  int32_t pid = 0;
  uint64_t nonce = 0;
  uint64_t cookie = 0;  // the connector's TCP socket
  uint16_t server_port = 0;
  uint8_t fd_count = 0;
  SlotOp slot_op = SlotOp::unpooled;
  uint16_t slot = 0;
};

struct Where {
  uint64_t cookie = 0;
  stats::Endpoint connector{};  // canonical (IPv4-mapped turned into IPv4)
};

struct Withdraw {
  uint64_t nonce = 0;
  uint64_t cookie = 0;
};

struct Reply {
  bool accepted = false;
  int32_t pid = 0;
  uint64_t nonce = 0;
  uint8_t fd_count = 0;
  char reason[kReasonMax + 1] = {};  // NUL-terminated
};

// Why a message was refused; nullptr when it is fine. Static strings.
using WireError = const char*;

// `len` is the length recvmsg returned; `truncated` its MSG_TRUNC flag.
WireError decode_hello(const void* buf, size_t len, bool truncated, Hello& out) noexcept;
WireError decode_reply(const void* buf, size_t len, bool truncated, Reply& out) noexcept;
WireError decode_where(const void* buf, size_t len, bool truncated, Where& out) noexcept;
WireError decode_withdraw(const void* buf, size_t len, bool truncated, Withdraw& out) noexcept;

HelloWire encode_hello(const Hello& h) noexcept;
WhereWire encode_where(const Where& w) noexcept;
WithdrawWire encode_withdraw(const Withdraw& w) noexcept;
// `reason` may be null (accepted); longer reasons are cut to kReasonMax - 1 bytes, and
// bytes other than printable ASCII become '?'.
ReplyWire encode_reply(bool accepted, int32_t pid, uint64_t nonce, uint8_t fd_count,
                       const char* reason) noexcept;

// The ancillary data of one received message. The kernel writes it, but its contents
// (how many descriptors, whether credentials are there) are the peer's choice.
inline constexpr int kControlFdCap = 16;  // more than fit in kControlBytes, see below
inline constexpr size_t kControlBytes =
    CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * kMaxPassedFds);
struct ControlData {
  int fds[kControlFdCap];
  int fd_count = 0;
  bool has_creds = false;
  struct ucred creds{};
  bool unexpected = false;  // a message type other than SCM_RIGHTS / SCM_CREDENTIALS
};
// Walks the control messages of `msg` (msg_controllen as recvmsg left it). Never closes
// anything: the caller owns ControlData::fds and must close them when it refuses the message.
void parse_control(const msghdr& msg, ControlData& out) noexcept;

// The checks shared by both ends once the payload decoded: exactly `expected_fds`
// descriptors, no truncated control data, nothing unexpected.
WireError check_control(const ControlData& c, int expected_fds, bool ctrunc) noexcept;

}  // namespace fastsock::shm
