// The help texts, kept together so that they read as one manual (docs/tools.md has the
// long form with examples).
#include <cstdio>
#include <string_view>

#include "commands.hpp"

namespace fastsock::tool {
namespace {

constexpr std::string_view kMainHelp = R"(Usage: fastsock <command> [options]

Run unmodified socket programs under the fastsock library and inspect them.

Commands:
  run [options] -- PROGRAM [ARGS...]  run PROGRAM with libfastsock.so preloaded
  info [--json]                       version, effective configuration, transports
  stat [PID] [--json]                 connections of a process; without PID, all processes
  help [COMMAND]                      show this help, or the help of COMMAND

Options:
  --help       show this help
  --version    show the version

Exit status: 0 success, 1 failure, 2 usage error; `run` exits with the program's status
(126 if it cannot be executed, 127 if it is not found).
)";

constexpr std::string_view kRunHelp = R"(Usage: fastsock run [options] [--] PROGRAM [ARGS...]

Run PROGRAM with libfastsock.so preloaded. Options are checked with the library's own
parsers before anything runs: a bad value is an error (exit 2).

Options:
  --transports LIST  failover chain, e.g. shm,verbs,vendor,tcp (FASTSOCK_TRANSPORTS)
  --log LEVEL        off, error, warn, info, debug or trace (FASTSOCK_LOG)
  --log-file PATH    append log lines to PATH instead of stderr (FASTSOCK_LOG_FILE)
  --rules FILE       connection rules file (FASTSOCK_RULES)
  --spin-us N        busy-wait budget in microseconds, 0-1000000 (FASTSOCK_SPIN_US)
  --spin-adapt BOOL  shorten the spin for waits that outlast it: on or off (FASTSOCK_SPIN_ADAPT)
  --no-stats         do not publish /dev/shm/fastsock-stats.PID (FASTSOCK_STATS=0)
  --lib PATH         use this libfastsock.so (default: $FASTSOCK_LIBRARY, else the
                     library installed next to this program)
  --help             show this help

The library is appended to any LD_PRELOAD entries already set, so a sanitizer runtime
preloaded first stays first.
)";

constexpr std::string_view kInfoHelp = R"(Usage: fastsock info [--json]

Show the version, the library `fastsock run` would load, the configuration a program
started from this environment would get (FASTSOCK_* variables and the rules file), and for
each transport (shm, verbs, vendor, tcp) whether this host can use it and, if not, why.

Options:
  --json   machine-readable output
  --help   show this help
)";

constexpr std::string_view kStatHelp = R"(Usage: fastsock stat [PID] [--json]

With PID: the connections of that process (it must run under fastsock and have had a TCP
socket): FD, ROLE, LOCAL, PEER, TRANSPORT, SENT, RECEIVED and WHY it is not on a faster
transport. Exit 1 if the process has no stats area.

Without PID: every process with a stats area, and stats files left behind by processes
that have exited (or whose pid was reused) are removed (only files you own).

Options:
  --json   machine-readable output
  --help   show this help
)";

void put(std::string_view text, std::FILE* out) {
  std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace

void print_main_help(std::FILE* out) { put(kMainHelp, out); }

bool print_command_help(std::string_view command, std::FILE* out) {
  if (command == "run") put(kRunHelp, out);
  else if (command == "info") put(kInfoHelp, out);
  else if (command == "stat") put(kStatHelp, out);
  else if (command == "help") put(kMainHelp, out);
  else return false;
  return true;
}

}  // namespace fastsock::tool
