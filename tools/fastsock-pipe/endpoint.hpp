// One end of the measured connection: its buffers, the run's payload offset (which drives
// the integrity pattern) and the integrity errors seen so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastsock_pipe {

struct Endpoint {
  int fd = -1;
  bool integrity = false;
  long long corrupt_at = -1;       // test only: transmitter flips this payload byte once
  uint64_t offset = 0;             // payload bytes the transmitter has sent in this run
  uint64_t errors = 0;             // corrupted bytes found (cumulative)
  uint64_t first_bad = 0;          // run offset of the first one
  std::vector<uint8_t> sbuf, rbuf;

  void resize(std::size_t bytes);  // buffers for messages of `bytes`, filled with data
  // Sends the next transmitter message (pattern for its run offset in integrity mode).
  bool send_message(std::size_t bytes);
  // Receives `bytes` into rbuf; in integrity mode checks them against the pattern at `base`.
  bool recv_message(std::size_t bytes, uint64_t base);
};

double now_seconds();  // CLOCK_MONOTONIC

}  // namespace fastsock_pipe
