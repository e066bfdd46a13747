// What the vendor link puts on the wire (docs/vendor.md, "The link"). Byte arrays with
// big-endian numbers, so hosts of either byte order understand each other.
//
// On a vendor connection, connector → acceptor: Hello, then the connector's stream header
// and stream. Acceptor → connector: Reply, then the acceptor's stream header and stream.
// A stream header is written once, at the end's first send after the link came up (Switch:
// "my stream left TCP after N bytes"), or when the end leaves the link before switching
// (Leave). After a Switch the vendor connection carries raw stream bytes. Before its own
// header an end may write one Ack: "I have read your Switch" — the only proof a sender
// has that its ResyncFrame on TCP will be looked for at its switch offset.
// On TCP nothing is ever added, except one ResyncFrame right after a sender's switch offset
// when it leaves the link deliberately (fork, exec, ...), written only after the receiver's
// Ack: the receiver knows that offset, so it knows these 16 bytes for what they are.
#pragma once

#include <cstdint>
#include <cstring>

namespace fastsock::vendors::wire {

inline constexpr uint8_t kVersion = 1;

// The connector's proof of which TCP connection this vendor connection belongs to: the
// TCP 4-tuple as the connector sees it, and a random nonce the acceptor echoes.
struct Hello {
  uint8_t magic[4];        // "FSVH"
  uint8_t version;
  uint8_t family;          // AF_INET or AF_INET6 of the TCP connection
  uint8_t client_port[2];  // the connector's TCP port
  uint8_t server_port[2];  // the listener's TCP port
  uint8_t reserved[6];
  uint8_t client_addr[16];
  uint8_t server_addr[16];
  uint8_t nonce[8];
};
static_assert(sizeof(Hello) == 56);
inline constexpr uint8_t kHelloMagic[4] = {'F', 'S', 'V', 'H'};

enum class Verdict : uint8_t {
  accepted = 0,
  no_connection = 1,  // no accepted TCP connection has this 4-tuple (in time)
  refused = 2,        // the acceptor's connection moved to TCP meanwhile
};

struct Reply {
  uint8_t magic[4];  // "FSVA"
  uint8_t version;
  uint8_t verdict;   // Verdict
  uint8_t reserved[2];
  uint8_t nonce[8];  // the Hello's
};
static_assert(sizeof(Reply) == 16);
inline constexpr uint8_t kReplyMagic[4] = {'F', 'S', 'V', 'A'};

enum class Kind : uint8_t {
  switch_at = 1,  // offset: bytes this end sent on TCP; raw stream bytes follow
  leave = 2,      // this end never switches: the peer must not switch either
  ack = 3,        // this end has read the peer's Switch; its own header follows later
};

struct StreamHeader {
  uint8_t magic[4];  // "FSVS"
  uint8_t version;
  uint8_t kind;      // Kind
  uint8_t reserved[2];
  uint8_t offset[8];
};
static_assert(sizeof(StreamHeader) == 16);
inline constexpr uint8_t kHeaderMagic[4] = {'F', 'S', 'V', 'S'};

// On TCP after the sender's switch offset: its stream carried `vendor_bytes` on the vendor
// connection and goes on on TCP after them; the sender left the link, so the receiver's
// own stream must not be on it.
struct ResyncFrame {
  uint8_t magic[4];  // "FSVR"
  uint8_t version;
  uint8_t reserved[3];
  uint8_t vendor_bytes[8];
};
static_assert(sizeof(ResyncFrame) == 16);
inline constexpr uint8_t kResyncMagic[4] = {'F', 'S', 'V', 'R'};

inline void put_be(uint8_t* p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}

inline StreamHeader stream_header(Kind kind, uint64_t offset) {
  StreamHeader h{};
  memcpy(h.magic, kHeaderMagic, 4);
  h.version = kVersion;
  h.kind = uint8_t(kind);
  put_be(h.offset, offset, 8);
  return h;
}
inline uint64_t get_be(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace fastsock::vendors::wire
