#include "proc_info.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <string>

namespace fastsock::tool {

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  size_t paren = text.rfind(')');
  if (paren == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(paren + 1);

  // rest is " S ppid pgrp ...": field 3 is the first token after ')'.
  ProcStat st;
  int field = 2;
  size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    if (pos >= rest.size()) break;
    size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view token = rest.substr(pos, end - pos);
    pos = end;
    ++field;
    if (field == 3) {
      if (token.size() != 1) return std::nullopt;
      st.state = token[0];
    } else if (field == 22) {
      while (!token.empty() && (token.back() == '\n')) token.remove_suffix(1);
      auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(),
                                       st.start_time_ticks);
      if (ec != std::errc() || ptr != token.data() + token.size()) return std::nullopt;
      return st;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> live_process_start_ticks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  if (n <= 0) return std::nullopt;
  std::optional<ProcStat> st = parse_proc_stat(std::string_view(buf, size_t(n)));
  // A zombie (Z) or dying (X) process has exited: whatever it published is stale.
  if (!st || st->state == 'Z' || st->state == 'X') return std::nullopt;
  return st->start_time_ticks;
}

}  // namespace fastsock::tool
