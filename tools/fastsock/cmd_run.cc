// fastsock run: check the options, set the FASTSOCK_* variables and LD_PRELOAD, exec.
//
// Every option value goes through the parser the library itself uses (src/config.hpp), so
// a value accepted here is a value the library accepts; a bad one stops here with exit 2
// instead of silently forcing the program into pass-through.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "config.hpp"
#include "env_config.hpp"
#include "exit_codes.hpp"
#include "library_path.hpp"
#include "options.hpp"

namespace fastsock::tool {
namespace {

constexpr const char* kCommand = "fastsock run";

struct RunOptions {
  std::optional<std::string> transports, log, log_file, rules, spin_us, spin_adapt, lib;
  bool no_stats = false;
};

// The library may read these after the program has changed directory: pass absolute paths.
std::string absolute_path(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.string();
}

// Checks every value with the library's parsers. Prints the first problem and returns false.
bool validate(const RunOptions& o, OptionCursor& cursor) {
  ParseError err;
  if (o.transports) {
    std::vector<TransportId> chain;
    if (!parse_transport_list(*o.transports, chain, err)) {
      cursor.usage_error("invalid --transports '" + *o.transports + "': " + err.message);
      return false;
    }
  }
  if (o.log) {
    LogLevel level;
    if (!parse_log_level(*o.log, level, err)) {
      cursor.usage_error("invalid --log '" + *o.log + "': " + err.message);
      return false;
    }
  }
  if (o.spin_us) {
    uint32_t spin;
    if (!parse_spin_us(*o.spin_us, spin, err)) {
      cursor.usage_error("invalid --spin-us '" + *o.spin_us + "': " + err.message);
      return false;
    }
  }
  if (o.spin_adapt) {
    bool adapt;
    if (!parse_bool(*o.spin_adapt, adapt, err)) {
      cursor.usage_error("invalid --spin-adapt '" + *o.spin_adapt + "': " + err.message);
      return false;
    }
  }
  // The library rejects empty paths (FASTSOCK_LOG_FILE="" is an error, not "stderr").
  if (o.log_file && o.log_file->empty()) {
    cursor.usage_error("--log-file needs a path (omit it to log to stderr)");
    return false;
  }
  if (o.rules && o.rules->empty()) {
    cursor.usage_error("--rules needs a path");
    return false;
  }
  if (o.rules) {
    std::string text, read_error;
    if (!read_text_file(*o.rules, text, read_error)) {
      cursor.usage_error("cannot read --rules file " + read_error);
      return false;
    }
    std::vector<Rule> rules;
    if (!parse_rules(text, rules, err)) {
      std::string where = err.line > 0 ? ":" + std::to_string(err.line) : "";
      cursor.usage_error("invalid --rules file " + *o.rules + where + ": " + err.message);
      return false;
    }
  }
  return true;
}

void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

[[noreturn]] void exec_program(std::span<char* const> program) {
  std::vector<char*> argv(program.begin(), program.end());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  int err = errno;
  if (err == ENOENT && std::strchr(argv[0], '/') == nullptr) {
    std::fprintf(stderr, "%s: %s: command not found\n", kCommand, argv[0]);
    std::exit(kExitNotFound);
  }
  std::fprintf(stderr, "%s: cannot execute %s: %s\n", kCommand, argv[0], std::strerror(err));
  std::exit(err == ENOENT ? kExitNotFound : kExitCannotExec);
}

}  // namespace

int cmd_run(std::span<char* const> args) {
  OptionCursor cursor(kCommand, args);
  RunOptions o;
  while (cursor.next()) {
    if (!cursor.is_option()) break;  // the program: options end here, as for env(1)
    std::string v;
    if (cursor.flag("--help")) {
      if (cursor.failed()) break;
      print_command_help("run", stdout);
      return kExitOk;
    } else if (cursor.value("--transports", v)) o.transports = v;
    else if (cursor.value("--log", v)) o.log = v;
    else if (cursor.value("--log-file", v)) o.log_file = v;
    else if (cursor.value("--rules", v)) o.rules = v;
    else if (cursor.value("--spin-us", v)) o.spin_us = v;
    else if (cursor.value("--spin-adapt", v)) o.spin_adapt = v;
    else if (cursor.value("--lib", v)) o.lib = v;
    else if (cursor.flag("--no-stats")) o.no_stats = true;
    else cursor.unknown();
  }
  if (cursor.failed()) return kExitUsage;
  std::span<char* const> program = cursor.rest();
  if (program.empty()) {
    cursor.usage_error("no program to run");
    return kExitUsage;
  }
  if (!validate(o, cursor)) return kExitUsage;

  if (o.lib && o.lib->empty()) {
    cursor.usage_error("--lib needs a path");
    return kExitUsage;
  }
  LibraryLocation lib = locate_library(o.lib.value_or(""));
  if (lib.path.empty()) {
    std::fprintf(stderr, "%s: %s\n", kCommand, lib.error.c_str());
    return o.lib ? kExitUsage : kExitFailure;
  }

  if (o.transports) set("FASTSOCK_TRANSPORTS", *o.transports);
  if (o.log) set("FASTSOCK_LOG", *o.log);
  if (o.log_file) set("FASTSOCK_LOG_FILE", absolute_path(*o.log_file));
  if (o.rules) set("FASTSOCK_RULES", absolute_path(*o.rules));
  if (o.spin_us) set("FASTSOCK_SPIN_US", *o.spin_us);
  if (o.spin_adapt) set("FASTSOCK_SPIN_ADAPT", *o.spin_adapt);
  if (o.no_stats) set("FASTSOCK_STATS", "0");

  const char* existing = std::getenv("LD_PRELOAD");
  std::string replaced;
  set("LD_PRELOAD", compose_ld_preload(existing ? existing : "", lib.path, &replaced));
  if (!replaced.empty())
    std::fprintf(stderr, "%s: warning: LD_PRELOAD named another fastsock library (%s); "
                 "using %s instead\n", kCommand, replaced.c_str(), lib.path.c_str());

  // Settings inherited from the environment were not checked above: say now, rather than
  // let the library quietly fall back to pass-through.
  Config effective = config_from_environment();
  if (effective.pass_through_forced)
    std::fprintf(stderr, "%s: warning: %s; every connection will stay on kernel TCP\n",
                 kCommand, effective.error.c_str());

  exec_program(program);
}

}  // namespace fastsock::tool
