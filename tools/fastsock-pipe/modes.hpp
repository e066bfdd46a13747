// The transfer modes. A "phase" is one warm-up or one trial: `reps` repetitions at one size.
#pragma once

#include <cstddef>
#include <vector>

#include "endpoint.hpp"

namespace fastsock_pipe {

enum class Mode { pingpong, stream, bidirectional };
const char* mode_name(Mode m);
// Message directions whose bytes count towards the bandwidth (2 in bidirectional mode, whose
// figure is the aggregate of both directions, as NetPIPE's).
inline int mode_directions(Mode m) { return m == Mode::bidirectional ? 2 : 1; }

// Transmitter side. `samples` (optional) receives the phase's one-way times: each round
// trip's half in ping-pong, the phase's time per message otherwise. `per_message` receives
// the phase's average one-way time (ping-pong: half round trip; streaming: time per message;
// bidirectional: time per repetition, in which each end sends one message).
bool tx_phase(Mode m, Endpoint& ep, std::size_t bytes, long reps, std::vector<double>* samples,
              double* per_message);
// Receiver side of the same phase.
bool rx_phase(Mode m, Endpoint& ep, std::size_t bytes, long reps);

// The individual modes (pingpong.cc, stream.cc, bidirectional.cc); `elapsed` is wall time.
bool pingpong_tx_phase(Endpoint& ep, std::size_t bytes, long reps, std::vector<double>* samples,
                       double* elapsed);
bool pingpong_rx_phase(Endpoint& ep, std::size_t bytes, long reps);
bool stream_tx_phase(Endpoint& ep, std::size_t bytes, long reps, double* elapsed);
bool stream_rx_phase(Endpoint& ep, std::size_t bytes, long reps);
bool bidirectional_tx_phase(Endpoint& ep, std::size_t bytes, long reps, double* elapsed);
bool bidirectional_rx_phase(Endpoint& ep, std::size_t bytes, long reps);

}  // namespace fastsock_pipe
