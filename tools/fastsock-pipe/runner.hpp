// The two ends of a run: the transmitter walks the size schedule and drives the receiver
// with SizeRequests; the receiver serves them until told to stop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "options.hpp"
#include "stats.hpp"

namespace fastsock_pipe {

struct RunResult {
  std::vector<SizeStats> sizes;
  RunSummary summary;
  bool stopped_early = false;     // --max-time or NetPIPE's 1 s per-message stop time
  std::string stop_reason;
  bool integrity_failed = false;
  std::string integrity_message;  // first failure, human readable
  double wall_seconds = 0;
};

// Called after each size (the live table).
using RowCallback = std::function<void(const SizeStats&, std::size_t index, std::size_t total)>;

// Returns false on a connection failure (reason printed); integrity failures are reported in
// `result` and still return true.
bool run_transmitter(int fd, const Options& opt, const RowCallback& on_row, RunResult& result);

// Serves one transmitter. Returns 0 on a clean end, 1 on a failure or a corrupted byte.
int run_receiver(int fd);

}  // namespace fastsock_pipe
