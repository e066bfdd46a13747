// A transmitter session: one measured connection driven size by size and trial by trial.
// DirectSession (session_direct.cc) owns the connection in this process; RemoteSession
// (session_remote.cc) forwards the same calls to a worker process (--compare), so one
// driver (driver.cc) interleaves the trials of several transports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "array_io.hpp"
#include "options.hpp"

namespace fastsock_pipe {

struct SizePlan {
  std::size_t bytes = 0;
  long repeats = 0;        // repetitions per timed trial
  int warmup = 0;          // untimed repetitions before the first trial
  int trials = 0;
  std::size_t pool_bytes = 0;  // per-direction buffer pool (cache invalidation), 0: none
};

struct SizeOutcome {
  uint64_t rx_errors = 0;     // corrupted bytes the receiver found
  uint64_t rx_first_bad = 0;  // run offset of its first one
  uint64_t tx_errors = 0;     // corrupted bytes the transmitter found in echoes / the peer's stream
  // How each end moved its messages, and the fastsock transport under it ("": none).
  ArrayPath tx_path = ArrayPath::plain, rx_path = ArrayPath::plain;
  std::string tx_transport, rx_transport;
};

class Session {
 public:
  virtual ~Session() = default;
  // Tells the receiver about the size and runs the untimed warm-up.
  virtual bool begin_size(const SizePlan& plan) = 0;
  // One timed trial: appends its one-way samples, sets its average one-way time.
  virtual bool trial(std::vector<double>& samples, double& per_message) = 0;
  // Collects the receiver's integrity report after the last trial.
  virtual bool end_size(SizeOutcome& out) = 0;
  // Tells the receiver the run is over (best effort).
  virtual void finish() = 0;
};

// A session on connected socket `fd` (closed by the destructor), in the mode of `opt`.
std::unique_ptr<Session> make_direct_session(int fd, const Options& opt);

// Serves one transmitter on `fd`. Returns 0 on a clean end, 1 on a failure or a corrupted byte.
int run_receiver(int fd);

}  // namespace fastsock_pipe
