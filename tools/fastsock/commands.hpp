// The subcommands of `fastsock`. Each takes the arguments that follow its name and returns
// the process exit code (exit_codes.hpp); `run` does not return when it starts the program.
#pragma once

#include <cstdio>
#include <span>
#include <string_view>

namespace fastsock::tool {

int cmd_run(std::span<char* const> args);
int cmd_info(std::span<char* const> args);
int cmd_stat(std::span<char* const> args);

// Help texts (help.cc). print_command_help returns false for an unknown command.
void print_main_help(std::FILE* out);
bool print_command_help(std::string_view command, std::FILE* out);

}  // namespace fastsock::tool
