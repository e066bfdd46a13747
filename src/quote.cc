#include "quote.hpp"

namespace fastsock {

std::string quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string q = "'";
  const size_t n = text.size() < kQuoteMax ? text.size() : kQuoteMax;
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      q += char(c);
    } else {
      q += "\\x";
      q += kHex[c >> 4];
      q += kHex[c & 0xf];
    }
  }
  if (n < text.size()) q += "...";
  q += '\'';
  return q;
}

}  // namespace fastsock
