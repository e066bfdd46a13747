// Command-line options of fastsock-pipe (docs/fastsock-pipe.md).
#pragma once

#include <cstddef>
#include <string>

namespace fastsock_pipe {

enum class Role { receiver, transmitter, local };

struct Options {
  Role role = Role::receiver;
  std::string host;              // -h: transmitter's peer
  int port = 5002;               // -P: NetPIPE's default port; 0 in local mode = any free port
  bool port_given = false;
  std::size_t lower = 1;         // -l
  std::size_t upper = 8388608;   // -u: NetPIPE's default upper bound (8 MiB)
  int perturbation = 3;          // -p
  // NetPIPE 3.7 as Debian builds it (without -DFINAL): TRIALS 3, RUNTM 0.10 s.
  int trials = 3;                // --trials: NetPIPE's TRIALS
  double trial_time = 0.10;      // --trial-time: NetPIPE's RUNTM, target seconds per trial
  double max_time = 0;           // --max-time: stop the run after this many seconds (0: none)
  bool stream = false;           // -s
  bool integrity = false;        // -i
  std::string csv_path, json_path, npout_path;
  bool pin = false;              // --cpus A,B
  int cpu_tx = -1, cpu_rx = -1;
  long long corrupt_at = -1;     // --corrupt-at N (test only): flip payload byte N once
  bool quiet = false;            // -q: no live table
  bool print_schedule = false;   // --print-schedule: list the sizes and exit
};

// Parses argv. Returns 0 and fills `out`; returns -1 after printing help or the version
// (exit 0); returns 2 after printing a usage error to stderr.
int parse_options(int argc, char** argv, Options& out);

void print_help();
inline constexpr const char* kVersion = "0.1.0";

}  // namespace fastsock_pipe
