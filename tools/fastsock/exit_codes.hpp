// Exit codes of the `fastsock` tool, shared by every subcommand.
//
// They follow the shell's conventions so that `fastsock run -- prog` is transparent in
// scripts: 126/127 mean what they mean for sh(1), and 2 is a usage error as for most
// Unix tools.
#pragma once

namespace fastsock::tool {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;       // the command ran but could not do its job
inline constexpr int kExitUsage = 2;         // bad option, bad option value, missing argument
inline constexpr int kExitCannotExec = 126;  // the program exists but could not be executed
inline constexpr int kExitNotFound = 127;    // the program was not found

}  // namespace fastsock::tool
