// The control messages between transmitter and receiver, on the measured connection itself
// (outside the timed loops). Fields travel big-endian so the ends may differ in byte order.
#pragma once

#include <cstdint>

namespace fastsock_pipe {

inline constexpr uint32_t kMagic = 0x46535050;  // "FSPP"
inline constexpr uint32_t kFlagStream = 1u << 0;
inline constexpr uint32_t kFlagIntegrity = 1u << 1;

enum class Command : uint32_t { size = 1, end = 2 };

// Transmitter -> receiver before each size: run `warmup` untimed repetitions, then `trials`
// trials of `repeats` repetitions of `bytes`-byte messages. After the last trial the
// receiver answers with a SizeReply.
struct SizeRequest {
  uint32_t magic;
  uint32_t command;
  uint64_t bytes;
  uint64_t repeats;
  uint32_t warmup;
  uint32_t trials;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(SizeRequest) == 40);

struct SizeReply {
  uint64_t errors;            // corrupted bytes seen by the receiver at this size
  uint64_t first_bad_offset;  // payload offset (whole run) of the first one, if any
};
static_assert(sizeof(SizeReply) == 16);

void to_wire(SizeRequest& r);    // host -> big-endian, in place
void from_wire(SizeRequest& r);  // big-endian -> host, in place
void to_wire(SizeReply& r);
void from_wire(SizeReply& r);

}  // namespace fastsock_pipe
