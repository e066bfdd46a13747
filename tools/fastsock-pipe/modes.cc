#include "modes.hpp"

namespace fastsock_pipe {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::pingpong: return "pingpong";
    case Mode::stream: return "stream";
    case Mode::bidirectional: return "bidirectional";
  }
  return "?";
}

bool tx_phase(Mode m, Endpoint& ep, std::size_t bytes, long reps, std::vector<double>* samples,
              double* per_message) {
  double elapsed = 0;
  bool ok = false;
  const double n = static_cast<double>(reps);
  switch (m) {
    case Mode::pingpong:
      ok = pingpong_tx_phase(ep, bytes, reps, samples, &elapsed);
      *per_message = elapsed / n / 2.0;
      return ok;
    case Mode::stream:
      ok = stream_tx_phase(ep, bytes, reps, &elapsed);
      break;
    case Mode::bidirectional:
      ok = bidirectional_tx_phase(ep, bytes, reps, &elapsed);
      break;
  }
  *per_message = elapsed / n;
  if (ok && samples) samples->push_back(*per_message);
  return ok;
}

bool rx_phase(Mode m, Endpoint& ep, std::size_t bytes, long reps) {
  switch (m) {
    case Mode::pingpong: return pingpong_rx_phase(ep, bytes, reps);
    case Mode::stream: return stream_rx_phase(ep, bytes, reps);
    case Mode::bidirectional: return bidirectional_rx_phase(ep, bytes, reps);
  }
  return false;
}

}  // namespace fastsock_pipe
