// What the tool needs to know about another process, from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace fastsock::tool {

struct ProcStat {
  char state = '?';              // field 3: R, S, D, Z, X, ...
  uint64_t start_time_ticks = 0; // field 22: clock ticks after boot
};

// Parses the contents of /proc/PID/stat. The command name (field 2) is in parentheses and
// may itself contain spaces and ')', so fields are counted from the *last* ')'.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// The start time of `pid` when it is a live process (not a zombie), else nullopt. Together
// with the pid, the start time identifies a process across pid reuse.
std::optional<uint64_t> live_process_start_ticks(pid_t pid);

}  // namespace fastsock::tool
