// The transmitter's main loop (NetPIPE's): walks the size schedule, applies the repeat rule
// and stop rules, and runs each size's trials. With several sessions (--compare) it
// interleaves them trial by trial - trial 1 of A, B, C, then trial 2 ... - so that drift of
// the host (frequency, other load) spreads over all transports instead of biasing one.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "options.hpp"
#include "session.hpp"
#include "stats.hpp"

namespace fastsock_pipe {

struct RunResult {
  std::vector<SizeStats> sizes;
  RunSummary summary;
  bool integrity_failed = false;
  std::string integrity_message;  // first failure, human readable
};

// One measured transport of a run: a single run has one, --compare one per entry.
struct Lane {
  std::string name;         // tcp, tcp6, unix, fastsock, or a preload library's file name
  std::string description;  // what it measures, one line
  std::string ld_preload;   // LD_PRELOAD of its processes ("" for none)
  std::string status = "ok";  // ok, skipped (never ran), failed (stopped by an error)
  std::string reason;       // why skipped or failed
  Session* session = nullptr;  // null once skipped or failed
  RunResult result;
  // How each end moved its messages at the last measured size, and the fastsock transport
  // it saw under the connection ("": none); empty paths until a size completed.
  std::string tx_path, rx_path, tx_transport, rx_transport;
};

struct RunInfo {
  bool stopped_early = false;  // --max-time or NetPIPE's 1 s per-message stop time
  std::string stop_reason;
  double wall_seconds = 0;
};

// Called after each size with the schedule position; lanes' results are up to date.
using RowCallback = std::function<void(std::size_t index, std::size_t total)>;

// Runs every lane that has a session. Returns false when no lane survived to the end.
bool run_lanes(std::vector<Lane>& lanes, const Options& opt, const RowCallback& on_row,
               RunInfo& info);

}  // namespace fastsock_pipe
