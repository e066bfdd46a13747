#include "elements.hpp"

#include <cstring>

namespace fastsock_pipe {

bool parse_element_type(std::string_view s, ElementType& out) {
  if (s == "byte" || s == "B]" || s == "B") out = ElementType::byte;
  else if (s == "int32" || s == "int" || s == "I]" || s == "I") out = ElementType::int32;
  else if (s == "double" || s == "D]" || s == "D") out = ElementType::float64;
  else return false;
  return true;
}

void fill_elements(uint8_t* buf, std::size_t bytes, ElementType t) {
  switch (t) {
    case ElementType::byte:
      std::memset(buf, 0x5a, bytes);
      break;
    case ElementType::int32: {
      auto* a = reinterpret_cast<int32_t*>(buf);  // buf is 64-byte aligned
      for (std::size_t i = 0; i < bytes / 4; ++i) a[i] = static_cast<int32_t>(i);
      break;
    }
    case ElementType::float64: {
      auto* a = reinterpret_cast<double*>(buf);
      for (std::size_t i = 0; i < bytes / 8; ++i) a[i] = static_cast<double>(i) * 0.5;
      break;
    }
  }
}

}  // namespace fastsock_pipe
