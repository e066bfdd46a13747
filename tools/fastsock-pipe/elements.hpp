// Element-type modes (the JFS thesis' B], I], D]): messages are arrays of bytes, int32 or
// doubles; sizes on the command line count elements, and a message of n elements is
// n * element_size bytes sent and received as one array, by the API --api selects
// (array_io.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fastsock_pipe {

enum class ElementType { byte, int32, float64 };

inline std::size_t element_size(ElementType t) {
  return t == ElementType::byte ? 1 : t == ElementType::int32 ? 4 : 8;
}
inline const char* element_name(ElementType t) {
  return t == ElementType::byte ? "byte" : t == ElementType::int32 ? "int32" : "double";
}
// Accepts byte/int32/double and the thesis' notation B], I], D] (also without the bracket).
bool parse_element_type(std::string_view s, ElementType& out);

// Fills `bytes` bytes of `buf` (64-byte aligned) with ordinary values of the element type:
// 0x5a bytes, the int32 sequence 0, 1, 2, ..., or the doubles 0.0, 0.5, 1.0, ...
void fill_elements(uint8_t* buf, std::size_t bytes, ElementType t);

}  // namespace fastsock_pipe
