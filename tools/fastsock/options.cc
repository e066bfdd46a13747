#include "options.hpp"

#include <cstdio>

namespace fastsock::tool {

bool OptionCursor::next() {
  if (failed_ || after_separator_) return false;
  if (started_) ++index_;
  started_ = true;
  if (index_ >= args_.size()) return false;
  if (current() == "--") {
    after_separator_ = true;
    ++index_;
    return false;
  }
  return true;
}

bool OptionCursor::is_option() const {
  std::string_view a = current();
  return a.size() > 1 && a[0] == '-';
}

bool OptionCursor::flag(std::string_view name) {
  std::string_view a = current();
  if (!a.starts_with(name)) return false;
  if (a.size() == name.size()) return true;
  if (a[name.size()] == '=') {
    usage_error(std::string("option '") + std::string(name) + "' takes no value");
    return true;
  }
  return false;
}

bool OptionCursor::value(std::string_view name, std::string& out) {
  std::string_view a = current();
  if (!a.starts_with(name)) return false;
  if (a.size() > name.size()) {
    if (a[name.size()] != '=') return false;
    out = std::string(a.substr(name.size() + 1));
    return true;
  }
  if (index_ + 1 >= args_.size()) {
    usage_error(std::string("option '") + std::string(name) + "' needs a value");
    return true;
  }
  ++index_;
  out = args_[index_];
  return true;
}

std::span<char* const> OptionCursor::rest() const {
  if (index_ >= args_.size()) return {};
  return args_.subspan(index_);
}

void OptionCursor::unknown() {
  usage_error(std::string("unknown option '") + std::string(current()) + "'");
}

void OptionCursor::usage_error(std::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s\nTry '%.*s --help' for more information.\n",
               int(command_.size()), command_.data(), int(message.size()), message.data(),
               int(command_.size()), command_.data());
  failed_ = true;
}

}  // namespace fastsock::tool
