#include "integrity.hpp"

namespace fastsock_pipe {

void fill_pattern(uint8_t* buf, std::size_t len, uint64_t base_offset) {
  for (std::size_t i = 0; i < len; ++i) buf[i] = pattern_byte(base_offset + i);
}

uint64_t check_pattern(const uint8_t* buf, std::size_t len, uint64_t base_offset,
                       uint64_t* first_bad) {
  uint64_t bad = 0;
  for (std::size_t i = 0; i < len; ++i) {
    if (buf[i] != pattern_byte(base_offset + i)) {
      if (bad == 0 && first_bad) *first_bad = base_offset + i;
      ++bad;
    }
  }
  return bad;
}

}  // namespace fastsock_pipe
