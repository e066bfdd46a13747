// fastsock: the command-line front end of the fastsock library (docs/tools.md).
//
// `fastsock <command> ...` dispatches to one function per subcommand (cmd_*.cc).
#include <cstdio>
#include <span>
#include <string_view>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "fastsock_build_config.h"

using namespace fastsock::tool;

namespace {

int usage_error(const char* message, std::string_view arg) {
  std::fprintf(stderr, "fastsock: %s '%.*s'\nTry 'fastsock --help' for more information.\n",
               message, int(arg.size()), arg.data());
  return kExitUsage;
}

int help_command(std::span<char* const> args) {
  if (args.empty()) {
    print_main_help(stdout);
    return kExitOk;
  }
  if (args.size() > 1) return usage_error("help takes one command name, got extra argument", args[1]);
  if (!print_command_help(args[0], stdout)) return usage_error("no such command", args[0]);
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  std::span<char* const> all(argv, size_t(argc));
  if (all.size() < 2) {
    print_main_help(stderr);
    return kExitUsage;
  }
  std::string_view command = all[1];
  std::span<char* const> args = all.subspan(2);

  if (command == "--help" || command == "-h") {
    print_main_help(stdout);
    return kExitOk;
  }
  if (command == "--version") {
    std::printf("fastsock %s\n", FASTSOCK_VERSION);
    return kExitOk;
  }
  if (command == "run") return cmd_run(args);
  if (command == "info") return cmd_info(args);
  if (command == "stat") return cmd_stat(args);
  if (command == "help") return help_command(args);
  if (command.starts_with("-")) return usage_error("unknown option", command);
  return usage_error("unknown command", command);
}
