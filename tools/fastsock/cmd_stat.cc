// fastsock stat: the connections of one process, or the list of processes with stats.
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "options.hpp"
#include "proc_sockets.hpp"
#include "stats_reader.hpp"
#include "text.hpp"

namespace fastsock::tool {
namespace {

constexpr const char* kCommand = "fastsock stat";

const char* json_bool(bool b) { return b ? "true" : "false"; }

void print_process_text(const ProcessStats& s) {
  std::printf("process %d (%s)\n", s.pid, s.program.c_str());
  std::printf("chain:        %s\n", s.chain.empty() ? "-" : s.chain.c_str());
  if (s.config_error.empty())
    std::printf("config error: none\n");
  else
    std::printf("config error: %s (pass-through forced)\n", s.config_error.c_str());
  std::printf("connections:  %llu tracked since start, %llu untracked (no free slot)\n",
              static_cast<unsigned long long>(s.total_connections),
              static_cast<unsigned long long>(s.untracked));
  if (s.ignored_slots > 0)
    std::printf("warning:      %llu slots with invalid contents ignored\n",
                static_cast<unsigned long long>(s.ignored_slots));
  std::printf("\n");
  if (s.connections.empty()) {
    std::printf("no open TCP sockets\n");
    return;
  }
  Table table({"FD", "ROLE", "LOCAL", "PEER", "TRANSPORT", "SENT", "RECEIVED", "WHY"});
  for (const ConnectionStats& c : s.connections) {
    table.add({std::to_string(c.fd), role_name(c.role), c.local, c.peer,
               std::string(transport_name(c.transport)), std::to_string(c.bytes_sent),
               std::to_string(c.bytes_received), c.reason.empty() ? "-" : c.reason});
  }
  table.print(stdout);
}

void print_process_json(const ProcessStats& s) {
  std::printf("{\n  \"pid\": %d,\n  \"program\": %s,\n  \"start_time_ticks\": %llu,\n", s.pid,
              json_quote(s.program).c_str(), static_cast<unsigned long long>(s.start_time_ticks));
  std::printf("  \"chain\": %s,\n  \"config_error\": %s,\n", json_quote(s.chain).c_str(),
              s.config_error.empty() ? "null" : json_quote(s.config_error).c_str());
  std::printf("  \"total_connections\": %llu,\n  \"untracked\": %llu,\n"
              "  \"ignored_slots\": %llu,\n  \"connections\": [",
              static_cast<unsigned long long>(s.total_connections),
              static_cast<unsigned long long>(s.untracked),
              static_cast<unsigned long long>(s.ignored_slots));
  for (size_t i = 0; i < s.connections.size(); ++i) {
    const ConnectionStats& c = s.connections[i];
    std::printf("%s\n    {\"fd\": %d, \"state\": %s, \"role\": %s, \"local\": %s, \"peer\": %s, "
                "\"transport\": %s, \"bytes_sent\": %llu, \"bytes_received\": %llu, "
                "\"opened_ns\": %llu, \"reason\": %s}",
                i == 0 ? "" : ",", c.fd, json_quote(state_name(c.state)).c_str(),
                json_quote(role_name(c.role)).c_str(), json_quote(c.local).c_str(),
                json_quote(c.peer).c_str(), json_quote(transport_name(c.transport)).c_str(),
                static_cast<unsigned long long>(c.bytes_sent),
                static_cast<unsigned long long>(c.bytes_received),
                static_cast<unsigned long long>(c.opened_ns), json_quote(c.reason).c_str());
  }
  std::printf("%s]\n}\n", s.connections.empty() ? "" : "\n  ");
}

// Removes a stale file and says what happened, in one clause.
std::string clean_up(const StatsFile& f, bool* removed = nullptr) {
  int rc = remove_stale(f);
  if (removed != nullptr) *removed = rc == 0;
  if (rc == 0) return "removed";
  if (rc == -EPERM) return "left alone: owned by another user";
  if (rc == -ESTALE || rc == -ENOENT) return "left alone: replaced or removed meanwhile";
  return std::string("could not remove: ") + std::strerror(-rc);
}

int stat_one(pid_t pid, bool json) {
  StatsFile f = read_stats_file(pid);
  switch (f.status) {
    case StatsStatus::ok:
      fill_unknown_addresses(f.stats);
      if (json) print_process_json(f.stats);
      else print_process_text(f.stats);
      return kExitOk;
    case StatsStatus::missing:
      std::fprintf(stderr,
                   "%s: process %d is not running under fastsock, or has no TCP socket yet "
                   "(no %s)\n", kCommand, pid, f.path.c_str());
      return kExitFailure;
    case StatsStatus::stale:
      std::fprintf(stderr, "%s: %s is stale: %s (%s)\n", kCommand, f.path.c_str(),
                   f.detail.c_str(), clean_up(f).c_str());
      return kExitFailure;
    case StatsStatus::unreadable:
      std::fprintf(stderr, "%s: cannot read %s: %s\n", kCommand, f.path.c_str(),
                   f.detail.c_str());
      return kExitFailure;
    case StatsStatus::invalid:
      std::fprintf(stderr, "%s: %s is not a valid fastsock stats area: %s\n", kCommand,
                   f.path.c_str(), f.detail.c_str());
      return kExitFailure;
  }
  return kExitFailure;
}

struct ListEntry {
  pid_t pid = 0;
  StatsFile file;
  size_t listening = 0, connected = 0;
  bool removed = false;
  std::string note;  // for stale/invalid/unreadable files
};

int stat_all(bool json) {
  std::vector<ListEntry> live, problems;
  for (pid_t pid : list_stats_pids()) {
    ListEntry e;
    e.pid = pid;
    e.file = read_stats_file(pid);
    switch (e.file.status) {
      case StatsStatus::ok:
        for (const ConnectionStats& c : e.file.stats.connections)
          (c.state == stats::SlotState::listening ? e.listening : e.connected)++;
        live.push_back(std::move(e));
        break;
      case StatsStatus::missing:  // exited and cleaned up between readdir and open
        break;
      case StatsStatus::stale:
        e.note = e.file.detail + "; " + clean_up(e.file, &e.removed);
        problems.push_back(std::move(e));
        break;
      case StatsStatus::unreadable:
      case StatsStatus::invalid:
        e.note = e.file.detail;
        problems.push_back(std::move(e));
        break;
    }
  }

  if (json) {
    std::printf("{\n  \"processes\": [");
    for (size_t i = 0; i < live.size(); ++i) {
      const ListEntry& e = live[i];
      std::printf("%s\n    {\"pid\": %d, \"program\": %s, \"listening\": %zu, "
                  "\"connected\": %zu, \"total_connections\": %llu}",
                  i == 0 ? "" : ",", e.pid, json_quote(e.file.stats.program).c_str(),
                  e.listening, e.connected,
                  static_cast<unsigned long long>(e.file.stats.total_connections));
    }
    std::printf("%s],\n  \"problems\": [", live.empty() ? "" : "\n  ");
    for (size_t i = 0; i < problems.size(); ++i) {
      const ListEntry& e = problems[i];
      const char* status = e.file.status == StatsStatus::stale ? "stale"
                           : e.file.status == StatsStatus::invalid ? "invalid" : "unreadable";
      std::printf("%s\n    {\"pid\": %d, \"path\": %s, \"status\": %s, \"removed\": %s, "
                  "\"detail\": %s}",
                  i == 0 ? "" : ",", e.pid, json_quote(e.file.path).c_str(),
                  json_quote(status).c_str(),
                  json_bool(e.removed), json_quote(e.note).c_str());
    }
    std::printf("%s]\n}\n", problems.empty() ? "" : "\n  ");
    return kExitOk;
  }

  if (live.empty()) {
    std::printf("no process is running under fastsock with a TCP socket\n");
  } else {
    Table table({"PID", "PROGRAM", "LISTENING", "CONNECTED", "TOTAL"});
    for (const ListEntry& e : live)
      table.add({std::to_string(e.pid), e.file.stats.program, std::to_string(e.listening),
                 std::to_string(e.connected), std::to_string(e.file.stats.total_connections)});
    table.print(stdout);
  }
  for (const ListEntry& e : problems) {
    const char* what = e.file.status == StatsStatus::stale ? "stale" : "unusable";
    std::printf("%s %s: %s\n", what, e.file.path.c_str(), e.note.c_str());
  }
  return kExitOk;
}

bool parse_pid(std::string_view text, pid_t& pid) {
  long long value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value <= 0 || value > INT_MAX)
    return false;
  pid = pid_t(value);
  return true;
}

}  // namespace

int cmd_stat(std::span<char* const> args) {
  OptionCursor cursor(kCommand, args);
  bool json = false;
  std::vector<std::string> positional;
  while (cursor.next()) {
    if (cursor.flag("--json")) json = true;
    else if (cursor.flag("--help")) {
      if (cursor.failed()) break;
      print_command_help("stat", stdout);
      return kExitOk;
    } else if (cursor.is_option()) cursor.unknown();
    else positional.emplace_back(cursor.current());
  }
  if (cursor.failed()) return kExitUsage;
  for (char* arg : cursor.rest()) positional.emplace_back(arg);
  if (positional.size() > 1) {
    cursor.usage_error("expected at most one PID, got '" + positional[1] + "' too");
    return kExitUsage;
  }
  if (positional.empty()) return stat_all(json);
  pid_t pid = 0;
  if (!parse_pid(positional[0], pid)) {
    cursor.usage_error("invalid PID '" + positional[0] + "'");
    return kExitUsage;
  }
  return stat_one(pid, json);
}

}  // namespace fastsock::tool
