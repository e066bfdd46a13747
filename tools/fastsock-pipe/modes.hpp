// The transfer modes. A "phase" is one warm-up or one trial: `reps` repetitions at one size.
#pragma once

#include <cstddef>
#include <vector>

#include "endpoint.hpp"

namespace fastsock_pipe {

// Ping-pong (pingpong.cc): the transmitter sends, the receiver echoes. `samples` (optional)
// receives each repetition's half round-trip time; `elapsed` the phase's wall time.
bool pingpong_tx_phase(Endpoint& ep, std::size_t bytes, long reps, std::vector<double>* samples,
                       double* elapsed);
bool pingpong_rx_phase(Endpoint& ep, std::size_t bytes, long reps);

// Streaming (stream.cc): the transmitter sends `reps` messages back to back; the receiver
// answers the last one with a one-byte acknowledgement that ends the transmitter's clock.
bool stream_tx_phase(Endpoint& ep, std::size_t bytes, long reps, double* elapsed);
bool stream_rx_phase(Endpoint& ep, std::size_t bytes, long reps);

}  // namespace fastsock_pipe
