#include <cstdint>

#include "modes.hpp"
#include "net.hpp"

namespace fastsock_pipe {

bool stream_tx_phase(Endpoint& ep, std::size_t bytes, long reps, double* elapsed) {
  const double start = now_seconds();
  for (long i = 0; i < reps; ++i) {
    if (!ep.send_message(ep.messages++, bytes, ep.offset)) return false;
    ep.offset += bytes;
  }
  // The clock stops when the receiver has everything; the acknowledgement's one-way trip is
  // included, as it is in any streaming measurement timed at one end (negligible when reps
  // is large, which NetPIPE's repeat rule ensures for small messages).
  uint8_t ack = 0;
  if (!recv_all(ep.fd, &ack, 1)) return false;
  *elapsed = now_seconds() - start;
  return true;
}

bool stream_rx_phase(Endpoint& ep, std::size_t bytes, long reps) {
  for (long i = 0; i < reps; ++i) {
    if (!ep.recv_message(ep.messages++, bytes, ep.offset)) return false;
    ep.offset += bytes;
  }
  const uint8_t ack = 1;
  return send_all(ep.fd, &ack, 1);
}

}  // namespace fastsock_pipe
