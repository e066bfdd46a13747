// What crosses the wire on the verbs link: the connection manager's private data and the
// messages on the queue pair. Fixed-width fields, multi-byte values big-endian, so hosts of
// either byte order understand each other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastsock::verbs {

inline constexpr uint16_t kWireMagic = 0xFA57;
// 2: the leave word (Msg::leave_word), so that two ends leaving the link at once lose nothing.
inline constexpr uint8_t kWireVersion = 2;

// rdma_connect's private data (RC: at most 56 bytes): which TCP connection this RDMA
// connection belongs to, as the connector sees it, and a nonce the acceptor echoes.
struct ConnectData {
  uint16_t magic;        // kWireMagic
  uint8_t version;       // kWireVersion
  uint8_t family;        // AF_INET or AF_INET6 of the TCP connection
  uint16_t client_port;  // the connector's TCP port
  uint16_t server_port;  // the listener's TCP port
  uint8_t client_addr[16];
  uint8_t server_addr[16];
  uint64_t nonce;
};
static_assert(sizeof(ConnectData) == 48 && sizeof(ConnectData) <= 56);
static_assert(offsetof(ConnectData, client_addr) == 8 && offsetof(ConnectData, nonce) == 40);

// rdma_accept's private data: the nonce echoed (the acceptor matched this connector's TCP
// connection, not some other).
struct AcceptData {
  uint16_t magic;
  uint8_t version;
  uint8_t reserved[5];
  uint64_t nonce;
};
static_assert(sizeof(AcceptData) == 16);

// rdma_reject's private data from a listener whose process did not accept the connection
// (a pre-forking server: verbs_redirect.hpp): connect again, to this RDMA port, where the
// process that accepted it listens. A reject without it means no fastsock listener.
struct RedirectData {
  uint16_t magic;    // kWireMagic
  uint8_t version;   // kWireVersion
  uint8_t kind;      // kRedirect
  uint16_t port;     // big-endian
  uint8_t reserved[2];
};
static_assert(sizeof(RedirectData) == 8);
inline constexpr uint8_t kRedirect = 1;

// Queue-pair messages are SEND_WITH_IMM. The immediate (big-endian on the wire) is
//   bits 31..24  message type
//   bits 23..0   receive slots the sender freed since its last message (credits returned)
// and the payload is the type's: stream bytes (data), a big-endian u64 (switch_at,
// downgrade), nothing (fin, credit), a big-endian u64 address and u32 rkey (leave_word).
enum class Msg : uint8_t {
  data = 1,       // stream bytes
  switch_at = 2,  // this end's stream continues here after that many bytes sent on TCP
  fin = 3,        // end of this end's stream (shutdown/close): nothing follows
  credit = 4,     // credits only
  downgrade = 5,  // this end leaves the link: its stream goes on on TCP from here, and the
                  // peer must resend on TCP what this end did not consume (payload: bytes
                  // of the peer's link stream this end consumed)
  leave_word = 6,  // where this end's leave word is, for the peer's RDMA READ (below);
                   // posted once, when the RDMA connection is established
};

// The leave word: 8 bytes of each end's memory, registered for its peer's RDMA READ, that
// say how far the end is in leaving the link (a downgrade), so that two ends leaving at the
// same moment agree on who resends what (Conn::leave_order, docs/verbs.md "Both ends at once").
// Stored big-endian by one 8-byte store: the state in the top byte, below it the bytes of
// the peer's link stream this end consumed (fixed once it leaves).
enum class Leave : uint8_t {
  on_link = 0,  // not leaving
  leaving = 1,  // leaving: posts its downgrade, then reads the peer's word
  first = 2,    // found the peer's word on_link: the peer leaves after taking our downgrade
  saw = 3,      // found the peer's word set: the peer's own finding (first or saw) decides
  second = 4,   // left without reading the peer's word, after taking its downgrade
};
inline constexpr uint64_t kLeaveConsumedMask = (uint64_t(1) << 56) - 1;
constexpr uint64_t make_leave(Leave state, uint64_t consumed) {
  return (uint64_t(state) << 56) | (consumed & kLeaveConsumedMask);
}
constexpr uint8_t leave_state(uint64_t word) { return uint8_t(word >> 56); }
constexpr uint64_t leave_consumed(uint64_t word) { return word & kLeaveConsumedMask; }

// Written on TCP, right after the sender's switch offset, by a sender whose link failed
// after it switched (the only bytes it ever writes there that are not stream bytes; the
// receiver knows the switch offset, so it knows them for what they are): the stream goes
// on on TCP from `resend_from`, the count of link bytes the receiver had consumed as far as
// its credits told, and every link byte after it follows, resent. The receiver skips those
// it already received over the link. Only a sender whose switch message is known to have
// reached the peer (its completion succeeded) writes one; otherwise the connection is reset.
struct ResyncFrame {
  uint8_t magic[4];        // "FSRS"
  uint8_t version;         // kWireVersion
  uint8_t reserved[3];
  uint8_t resend_from[8];  // big-endian
};
static_assert(sizeof(ResyncFrame) == 16);
inline constexpr uint8_t kResyncMagic[4] = {'F', 'S', 'R', 'S'};

constexpr uint32_t make_imm(Msg type, uint32_t credits) {
  return (uint32_t(type) << 24) | (credits & 0xFFFFFF);
}
constexpr Msg imm_type(uint32_t imm) { return Msg(imm >> 24); }
constexpr uint32_t imm_credits(uint32_t imm) { return imm & 0xFFFFFF; }

inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace fastsock::verbs
