// Quoting untrusted configuration text inside a one-line message.
//
// Shared by the configuration parser (src/config.cc) and the parsers it delegates to
// (transports/vendor/vendor_profile.cc), so every message quotes hostile input the same way.
#pragma once

#include <string>
#include <string_view>

namespace fastsock {

// Bytes of hostile input a message shows at most; longer text is cut and marked "...".
inline constexpr size_t kQuoteMax = 40;

// 'text' in single quotes, cut to kQuoteMax bytes ("..." marks the cut), with quotes,
// backslashes and non-printable bytes escaped as \xNN.
std::string quote(std::string_view text);

}  // namespace fastsock
