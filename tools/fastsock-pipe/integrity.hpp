// Integrity mode (-i): every message carries a pattern derived from its payload offset in the
// run, so both ends can regenerate the expected bytes and find the first wrong one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastsock_pipe {

// Byte at payload offset `off` of the run.
inline uint8_t pattern_byte(uint64_t off) {
  return static_cast<uint8_t>((off * 2654435761u) >> 13 ^ off);
}

void fill_pattern(uint8_t* buf, std::size_t len, uint64_t base_offset);

// Counts mismatching bytes; stores the run offset of the first one in *first_bad.
uint64_t check_pattern(const uint8_t* buf, std::size_t len, uint64_t base_offset,
                       uint64_t* first_bad);

}  // namespace fastsock_pipe
