// Bidirectional mode: both ends stream `reps` messages at the same time. Each end sends from
// a second thread while its main thread receives, so neither blocks the other when the
// socket buffers fill (a single thread alternating send and recv would deadlock on large
// messages). The receiver waits for a one-byte start signal, sent after the transmitter's
// clock starts, so that it cannot run ahead while the transmitter is idle between trials.
#include <cstdint>
#include <thread>

#include "modes.hpp"
#include "net.hpp"

namespace fastsock_pipe {
namespace {

// Sends `reps` messages from this end's send slots while the caller receives into its
// receive slots. Offsets count per direction, identical on both ends, so each end checks
// the peer's messages against the same pattern positions it used for its own.
bool exchange(Endpoint& ep, std::size_t bytes, long reps) {
  const uint64_t base = ep.offset;
  const uint64_t first_slot = ep.messages;
  bool sent_ok = true;
  std::thread sender([&] {
    for (long i = 0; i < reps && sent_ok; ++i)
      sent_ok = ep.send_message(first_slot + static_cast<uint64_t>(i), bytes,
                                base + static_cast<uint64_t>(i) * bytes);
  });
  bool recv_ok = true;
  for (long i = 0; i < reps && recv_ok; ++i)
    recv_ok = ep.recv_message(first_slot + static_cast<uint64_t>(i), bytes,
                              base + static_cast<uint64_t>(i) * bytes);
  if (!recv_ok) shutdown_both(ep.fd);  // unblocks a sender stuck on a dead peer
  sender.join();
  ep.messages += static_cast<uint64_t>(reps);
  ep.offset += static_cast<uint64_t>(reps) * bytes;
  return sent_ok && recv_ok;
}

}  // namespace

bool bidirectional_tx_phase(Endpoint& ep, std::size_t bytes, long reps, double* elapsed) {
  const double start = now_seconds();
  const uint8_t go = 1;
  if (!send_all(ep.fd, &go, 1)) return false;
  if (!exchange(ep, bytes, reps)) return false;
  // The receiver acknowledges once it has all of ours: both directions are complete.
  uint8_t ack = 0;
  if (!recv_all(ep.fd, &ack, 1)) return false;
  *elapsed = now_seconds() - start;
  return true;
}

bool bidirectional_rx_phase(Endpoint& ep, std::size_t bytes, long reps) {
  uint8_t go = 0;
  if (!recv_all(ep.fd, &go, 1)) return false;
  if (!exchange(ep, bytes, reps)) return false;
  const uint8_t ack = 1;
  return send_all(ep.fd, &ack, 1);
}

}  // namespace fastsock_pipe
