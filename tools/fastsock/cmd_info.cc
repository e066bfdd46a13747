// fastsock info: what a program started from this environment would get.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "config.hpp"
#include "env_config.hpp"
#include "exit_codes.hpp"
#include "fastsock_build_config.h"
#include "library_path.hpp"
#include "options.hpp"
#include "stats_layout.hpp"
#include "text.hpp"
#include "transport.hpp"

namespace fastsock::tool {
namespace {

struct TransportStatus {
  std::string name;
  bool in_build = false;
  bool available = false;
  bool in_chain = false;
  std::string reason;  // why it cannot be used; for an available one, what the probe said
};

std::vector<TransportStatus> transport_statuses(const Config& config) {
  std::vector<TransportStatus> out;
  for (int i = 0; i < kTransportCount; ++i) {
    TransportId id = TransportId(i);
    TransportStatus t;
    t.name = std::string(transport_name(id));
    for (TransportId c : config.chain) t.in_chain = t.in_chain || c == id;
    if (const TransportEntry* entry = find_transport(id)) {
      t.in_build = true;
      Probe probe = entry->probe();
      t.available = probe.available;
      t.reason = printable(probe.reason, sizeof(probe.reason));
    } else {
      const char* why = missing_transport_reason(id);
      t.reason = why != nullptr ? why : "not in this build";
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string chain_text(const std::vector<TransportId>& chain) {
  std::string out;
  for (TransportId id : chain) {
    if (!out.empty()) out += ',';
    out += transport_name(id);
  }
  return out;
}

const char* yes_no(bool b) { return b ? "yes" : "no"; }
const char* json_bool(bool b) { return b ? "true" : "false"; }

void print_text(const Config& c, const LibraryLocation& lib,
                const std::vector<TransportStatus>& transports) {
  std::printf("fastsock %s\n", FASTSOCK_VERSION);
  if (!lib.path.empty())
    std::printf("library:    %s (%s)\n", lib.path.c_str(), lib.source.c_str());
  else
    std::printf("library:    not found: %s\n", lib.error.c_str());

  std::printf("\nconfiguration (from this environment):\n");
  std::printf("  chain:      %s\n", chain_text(c.chain).c_str());
  std::printf("  log level:  %s\n", std::string(log_level_name(c.log_level)).c_str());
  std::printf("  log file:   %s\n", c.log_file.empty() ? "stderr" : c.log_file.c_str());
  std::printf("  spin:       %u us%s\n", c.spin_us,
              c.spin_us == 0 ? "" : c.spin_adapt ? " at most (adaptive)" : " (fixed)");
  std::printf("  ring max:   %u KiB (shm)\n", c.shm_ring_max >> 10);
  if (c.verbs_zero_copy)
    std::printf("  zero-copy:  verbs sends from %u KiB\n", c.verbs_zero_copy_min >> 10);
  else
    std::printf("  zero-copy:  off on verbs\n");
  std::printf("  stats:      %s\n", c.stats_enabled ? "on" : "off");
  if (c.rules_path.empty())
    std::printf("  rules:      none\n");
  else
    std::printf("  rules:      %s (%zu rules)\n", c.rules_path.c_str(), c.rules.size());
  if (c.pass_through_forced)
    std::printf("  error:      %s\n"
                "              -> pass-through forced: every connection stays on kernel TCP\n",
                c.error.c_str());
  else
    std::printf("  error:      none\n");

  std::printf("\ntransports (in order of preference):\n");
  Table table({"  TRANSPORT", "IN CHAIN", "USABLE", "REASON"});
  for (const TransportStatus& t : transports) {
    std::string reason = t.reason.empty() ? "-" : t.reason;
    table.add({"  " + t.name, yes_no(t.in_chain), yes_no(t.available), reason});
  }
  table.print(stdout);
}

void print_json(const Config& c, const LibraryLocation& lib,
                const std::vector<TransportStatus>& transports) {
  std::printf("{\n  \"version\": %s,\n", json_quote(FASTSOCK_VERSION).c_str());
  if (!lib.path.empty())
    std::printf("  \"library\": {\"path\": %s, \"source\": %s, \"error\": null},\n",
                json_quote(lib.path).c_str(), json_quote(lib.source).c_str());
  else
    std::printf("  \"library\": {\"path\": null, \"source\": null, \"error\": %s},\n",
                json_quote(lib.error).c_str());

  std::string chain;
  for (TransportId id : c.chain) {
    if (!chain.empty()) chain += ", ";
    chain += json_quote(transport_name(id));
  }
  std::printf("  \"config\": {\n");
  std::printf("    \"chain\": [%s],\n", chain.c_str());
  std::printf("    \"log_level\": %s,\n", json_quote(log_level_name(c.log_level)).c_str());
  std::printf("    \"log_file\": %s,\n", c.log_file.empty() ? "null" : json_quote(c.log_file).c_str());
  std::printf("    \"spin_us\": %u,\n", c.spin_us);
  std::printf("    \"spin_adapt\": %s,\n", json_bool(c.spin_adapt));
  std::printf("    \"shm_ring_max\": %u,\n", c.shm_ring_max);
  std::printf("    \"verbs_zero_copy\": %s,\n", json_bool(c.verbs_zero_copy));
  std::printf("    \"verbs_zero_copy_min\": %u,\n", c.verbs_zero_copy_min);
  std::printf("    \"stats\": %s,\n", json_bool(c.stats_enabled));
  std::printf("    \"rules_file\": %s,\n",
              c.rules_path.empty() ? "null" : json_quote(c.rules_path).c_str());
  std::printf("    \"rules\": %zu,\n", c.rules.size());
  std::printf("    \"pass_through_forced\": %s,\n", json_bool(c.pass_through_forced));
  std::printf("    \"error\": %s\n",
              c.pass_through_forced ? json_quote(c.error).c_str() : "null");
  std::printf("  },\n  \"transports\": [\n");
  for (size_t i = 0; i < transports.size(); ++i) {
    const TransportStatus& t = transports[i];
    std::printf("    {\"name\": %s, \"in_build\": %s, \"available\": %s, \"in_chain\": %s, "
                "\"reason\": %s}%s\n",
                json_quote(t.name).c_str(), json_bool(t.in_build), json_bool(t.available),
                json_bool(t.in_chain), json_quote(t.reason).c_str(),
                i + 1 < transports.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
}

}  // namespace

int cmd_info(std::span<char* const> args) {
  OptionCursor cursor("fastsock info", args);
  bool json = false;
  while (cursor.next()) {
    if (cursor.flag("--json")) json = true;
    else if (cursor.flag("--help")) {
      if (cursor.failed()) break;
      print_command_help("info", stdout);
      return kExitOk;
    } else if (cursor.is_option()) cursor.unknown();
    else cursor.usage_error("unexpected argument '" + std::string(cursor.current()) + "'");
  }
  if (cursor.failed()) return kExitUsage;
  if (!cursor.rest().empty()) {
    cursor.usage_error("unexpected argument '" + std::string(cursor.rest()[0]) + "'");
    return kExitUsage;
  }

  Config config = config_from_environment();
  LibraryLocation lib = locate_library("");
  std::vector<TransportStatus> transports = transport_statuses(config);
  if (json) print_json(config, lib, transports);
  else print_text(config, lib, transports);
  return kExitOk;
}

}  // namespace fastsock::tool
