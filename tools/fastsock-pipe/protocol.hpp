// The control messages between transmitter and receiver, on the measured connection itself
// (outside the timed loops). Fields travel big-endian so the ends may differ in byte order.
#pragma once

#include <cstdint>

namespace fastsock_pipe {

inline constexpr uint32_t kMagic = 0x46535050;   // "FSPP"
// 2: modes, element type, cache pool. 3: array API flags; the reply says how the receiver
// moved the arrays and on which fastsock transport.
inline constexpr uint32_t kProtocolVersion = 3;
// SizeRequest.flags. Element arrays (not bytes) move with the typed API, or the portable
// big-endian staging (array_io.hpp); neither flag: plain send/recv.
inline constexpr uint32_t kFlagIntegrity = 1u << 0;
inline constexpr uint32_t kFlagTypedApi = 1u << 1;
inline constexpr uint32_t kFlagPortableApi = 1u << 2;
inline constexpr uint32_t kKnownFlags = kFlagIntegrity | kFlagTypedApi | kFlagPortableApi;
// SizeRequest.mode: the Mode enumerator's value (modes.hpp).

enum class Command : uint32_t { size = 1, end = 2 };

// Transmitter -> receiver before each size: run `warmup` untimed repetitions, then `trials`
// trials of `repeats` repetitions of `bytes`-byte messages, in `mode`, with buffers of
// `pool_bytes` per direction (0: one message's worth). After the last trial the receiver
// answers with a SizeReply.
struct SizeRequest {
  uint32_t magic;
  uint32_t version;
  uint32_t command;
  uint32_t mode;
  uint64_t bytes;
  uint64_t repeats;
  uint64_t pool_bytes;
  uint32_t warmup;
  uint32_t trials;
  uint32_t flags;
  uint32_t element;  // ElementType's value
};
static_assert(sizeof(SizeRequest) == 56);

struct SizeReply {
  uint64_t errors;            // corrupted bytes seen by the receiver at this size
  uint64_t first_bad_offset;  // payload offset (whole run) of the first one, if any
  uint32_t array_path;        // ArrayPath the receiver moved the messages with
  uint32_t reserved;
  char transport[16];         // fastsock_transport() of its end, NUL-padded ("": none)
};
static_assert(sizeof(SizeReply) == 40);

void to_wire(SizeRequest& r);    // host -> big-endian, in place
void from_wire(SizeRequest& r);  // big-endian -> host, in place
void to_wire(SizeReply& r);
void from_wire(SizeReply& r);

}  // namespace fastsock_pipe
