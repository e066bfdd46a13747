// Output helpers: untrusted strings made printable, JSON string quoting, aligned tables.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace fastsock::tool {

// The bytes of a fixed-size char field from another process, up to the first NUL or
// `capacity` (the field need not be NUL-terminated). Control characters and non-ASCII
// bytes become '?', so that a hostile or corrupt file cannot send escape sequences to the
// terminal or produce invalid UTF-8 in JSON output.
std::string printable(const char* field, size_t capacity);

// `text` as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

// A text table: left-aligned columns separated by two spaces; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::FILE* out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fastsock::tool
