// Reads the statistics area another process publishes (src/stats_layout.hpp).
//
// Everything in the file is untrusted: it belongs to another process, which may be buggy,
// dying, or hostile, and any process of the same user can write it. The reader maps it
// read-only, copies it out under a SIGBUS guard (a concurrent ftruncate() would otherwise
// kill the tool), and then decodes the private copy field by field with bounds checks, so
// the values it checked are the values it prints.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stats_layout.hpp"
#include "transport_id.hpp"

namespace fastsock::tool {

struct ConnectionStats {
  int32_t fd = -1;
  stats::SlotState state = stats::SlotState::free;
  stats::Role role = stats::Role::none;
  TransportId transport = TransportId::tcp;
  std::string local;            // "127.0.0.1:80", "[::1]:80", "-" when unknown
  std::string peer;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t opened_ns = 0;
  std::string reason;           // printable; may be empty
};

struct ProcessStats {
  pid_t pid = 0;
  uint64_t start_time_ticks = 0;
  std::string program;          // printable
  std::string chain;
  std::string config_error;
  uint64_t total_connections = 0;
  uint64_t untracked = 0;
  std::vector<ConnectionStats> connections;  // listening and connected slots, by fd
  uint64_t ignored_slots = 0;   // slots with out-of-range state, role or transport
};

enum class StatsStatus {
  ok,
  missing,     // no stats file for this pid
  unreadable,  // exists but cannot be opened (another user's file, ...)
  invalid,     // not a fastsock stats area of this version
  stale,       // left behind by a process that has exited, or whose pid was reused
};

struct StatsFile {
  StatsStatus status = StatsStatus::missing;
  std::string path;
  std::string detail;           // one clause explaining any status other than ok
  ProcessStats stats;           // filled when status == ok
  // Identity of the file that was examined, so that a stale file is removed only if it
  // is still the same file (a new process may have reused the pid and the name meanwhile).
  bool have_identity = false;
  dev_t dev = 0;
  ino_t ino = 0;
  uid_t owner = 0;
};

// /dev/shm/fastsock-stats.<pid>
std::string stats_path(pid_t pid);

// Reads and checks the stats file of `pid`, including whether that process still exists
// and is the one that wrote the file (start time, field 22 of /proc/PID/stat).
StatsFile read_stats_file(pid_t pid);

// Decodes a private copy of an area of exactly stats::kAreaSize bytes (exposed for tests).
// Returns false with `detail` set when the header is not a valid area for `pid`.
bool decode_area(const unsigned char* area, size_t size, pid_t pid, ProcessStats& out,
                 std::string& detail);

// Removes a stale file if it is still the file `file` describes and belongs to this user.
// Returns 0 or -errno (-EPERM for another user's file, -ESTALE if it changed meanwhile).
int remove_stale(const StatsFile& file);

// Processes with a stats file: the pids parsed from /dev/shm/fastsock-stats.<pid> names.
std::vector<pid_t> list_stats_pids();

// Names for output.
const char* role_name(stats::Role role);
const char* state_name(stats::SlotState state);

}  // namespace fastsock::tool
