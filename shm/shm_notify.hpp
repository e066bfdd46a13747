// Wake-ups between the two ends of a segment, with no system call on the fast path.
//
// Each side sleeps on its own eventfd (created by the caller, non-blocking; the caller
// also polls it together with the TCP socket) and signals the peer's. A side that is about
// to sleep arms a flag in its SideLine; a producer that published bytes, or a consumer that
// freed space, signals the peer's eventfd only if the peer armed the matching flag, and only
// once until the peer drains it (`pending`). So a connection that never waits never makes a
// notification system call, and a stream of publishes to a sleeping peer makes one.
//
// The waiter's protocol (the caller implements the loop; spin first if it likes):
//
//   for (;;) {
//     if (ring has what I need) break;
//     n.arm_for_data();              // seq_cst: ordered before the re-check
//     if (ring has what I need) break;  // re-check: closes the race with the producer
//     poll({n.fd(), tcp fd}, timeout);
//     n.drain();                     // before the next check
//   }
//
// The publisher calls data_published() after RingProducer::write (or space_freed() after
// RingConsumer::read); it issues a seq_cst fence, then loads the peer's flag. Either the
// waiter's re-check sees the bytes, or the publisher sees the flag: a wake-up is never lost.
//
// An arm is for one signal: it clears itself when the signal is sent, and every waiter
// (a blocking call, a poll, an epoll registration) arms again each time before it sleeps.
//
// The flags and `pending` are shared and untrusted: a peer that scribbles them can only make
// us send it more signals (at most one eventfd write per publish) or none, i.e. slow down or
// stall its own connection. The eventfds are read and written with raw system calls
// (shm_sys.hpp), never through the library's hooks.
#pragma once

#include <cstdint>

#include "shm_segment.hpp"

namespace fastsock::shm {

class Notifier {
 public:
  Notifier() = default;
  // `side` is this end (0 connector, 1 acceptor). own_eventfd is the one this side sleeps
  // on, and must be non-blocking (EFD_NONBLOCK: drain() must never block; checking it here
  // cost a system call per connection, and every caller creates its own). peer_eventfd
  // may be -1 until the peer's is known (set_peer). Neither fd is owned (the caller closes
  // them).
  Notifier(const Segment& segment, int side, int own_eventfd, int peer_eventfd);
  // The peer's eventfd, once it arrived (the connector gets it with the acceptor's reply).
  void set_peer(int peer_eventfd) { peer_fd_ = peer_eventfd; }

  // Waiting side.
  void arm_for_data();
  void arm_for_space();
  // Consumes the signals on the own eventfd (non-blocking read) and clears `pending`;
  // returns how many signals were counted (0 if none).
  uint64_t drain();
  // drain() when the peer announced a signal (`pending`), else nothing (no system call).
  // For an eventfd watched edge-triggered only: a count the peer left without announcing
  // (it wrote after our last drain cleared `pending`, or it is hostile) stays, and wakes
  // nobody; a level-triggered watcher would wake on it again and again.
  uint64_t drain_if_signalled();
  int fd() const { return own_fd_; }
  // Notes the CPU this side is about to wait on and tells whether the peer last waited on
  // the same one. Spinning only helps while the peer runs on another CPU; on ours it would
  // hold the CPU the peer needs to answer for the whole spin budget, so the caller yields.
  bool peer_on_my_cpu();
  // Notes the CPU this side runs on without asking about the peer's: an acceptor does at
  // its confirmation, so that a connector whose first wait comes before the acceptor ever
  // waited (a server that answers and closes never does) knows whether to spin or yield.
  void note_my_cpu();

  // Publishing side. Return whether the peer's eventfd was written.
  bool data_published();  // after bytes were written to direction `side`
  bool space_freed();     // after bytes were consumed from direction 1 - side

  // Eventfd writes issued by this end (for stats and tests).
  uint64_t signals_sent() const { return signals_sent_; }

 private:
  bool signal_if_armed(std::atomic<uint32_t>& flag);

  SideLine* own_ = nullptr;
  SideLine* peer_ = nullptr;
  int own_fd_ = -1;
  int peer_fd_ = -1;
  uint64_t signals_sent_ = 0;
};

}  // namespace fastsock::shm
