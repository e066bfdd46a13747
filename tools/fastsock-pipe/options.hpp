// Command-line options of fastsock-pipe (docs/fastsock-pipe.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "array_io.hpp"
#include "elements.hpp"
#include "modes.hpp"

namespace fastsock_pipe {

// `worker` is internal: --compare re-executes the binary once per transport in this role.
enum class Role { receiver, transmitter, local, worker };

struct Options {
  Role role = Role::receiver;
  std::string host;              // -h: transmitter's peer ("unix:PATH" for a Unix socket)
  int port = 5002;               // -P: NetPIPE's default port; 0 in local mode = any free port
  bool port_given = false;
  bool ipv6 = false;             // -6: receiver listens on ::, local mode uses ::1
  std::string unix_path;         // --unix PATH: receiver / local mode over a Unix socket
  std::vector<std::string> compare;  // --compare: transports measured side by side
  std::size_t lower = 1;         // -l (elements; bytes unless --elements)
  std::size_t upper = 8388608;   // -u: NetPIPE's default upper bound (8 MiB)
  int perturbation = 3;          // -p
  int socket_buffer = 0;         // -b: SO_SNDBUF/SO_RCVBUF bytes at each end (0: autotuning)
  // NetPIPE 3.7 as Debian builds it (without -DFINAL): TRIALS 3, RUNTM 0.10 s.
  int trials = 3;                // --trials: NetPIPE's TRIALS
  double trial_time = 0.10;      // --trial-time: NetPIPE's RUNTM, target seconds per trial
  double max_time = 0;           // --max-time: stop the run after this many seconds (0: none)
  Mode mode = Mode::pingpong;    // -s streaming, -2 bidirectional
  bool integrity = false;        // -i
  bool cache_invalidate = false; // -I: walk through buffers larger than the last-level cache
  std::size_t cache_bytes = 0;   // --cache-bytes: the cache size -I must exceed (0: detect)
  ElementType element = ElementType::byte;  // --elements
  ArrayApi api = ArrayApi::typed;  // --api: how int32/double arrays move (bytes: always plain)
  std::string csv_path, json_path, npout_path, plot_prefix;
  int npout_format = 3;          // --npout-format 3|5: NetPIPE 3.7's or 5.x's columns
  bool pin = false;              // --cpus A,B
  int cpu_tx = -1, cpu_rx = -1;
  long long corrupt_at = -1;     // --corrupt-at N (test only): flip payload byte N once
  bool quiet = false;            // -q: no live table
  bool progress = false;         // --progress: progress on stderr even when not a terminal
  bool print_schedule = false;   // --print-schedule: list the sizes and exit
  // Role::worker only (hidden options set by the --compare coordinator).
  int worker_in = -1, worker_out = -1;  // --worker IN,OUT: command and reply pipes
  std::string expect_preload;    // --expect-preload LIB: fail unless LIB is mapped
};

// Parses argv. Returns 0 and fills `out`; returns -1 after printing help or the version
// (exit 0); returns 2 after printing a usage error to stderr.
int parse_options(int argc, char** argv, Options& out);

void print_help();
inline constexpr const char* kVersion = "0.2.0";

}  // namespace fastsock_pipe
