#include "modes.hpp"

namespace fastsock_pipe {

bool pingpong_tx_phase(Endpoint& ep, std::size_t bytes, long reps, std::vector<double>* samples,
                       double* elapsed) {
  const double start = now_seconds();
  double prev = start;
  for (long i = 0; i < reps; ++i) {
    const std::size_t slot = ep.messages++;
    if (!ep.send_message(slot, bytes, ep.offset)) return false;
    // The echo must equal what this end meant to send, so a byte corrupted anywhere on the
    // way out or back is caught here as well as at the receiver.
    if (!ep.recv_message(slot, bytes, ep.offset)) return false;
    ep.offset += bytes;
    if (samples) {
      const double t = now_seconds();
      samples->push_back((t - prev) / 2.0);
      prev = t;
    }
  }
  *elapsed = now_seconds() - start;
  return true;
}

bool pingpong_rx_phase(Endpoint& ep, std::size_t bytes, long reps) {
  for (long i = 0; i < reps; ++i) {
    const std::size_t slot = ep.messages++;
    if (!ep.recv_message(slot, bytes, ep.offset)) return false;
    // Echo exactly what arrived (not a fresh pattern), so the transmitter checks the whole path.
    if (!ep.echo_message(slot, bytes)) return false;
    ep.offset += bytes;
  }
  return true;
}

}  // namespace fastsock_pipe
