// Late attach: a connection whose acceptor had no hello moves to shm after it started on
// TCP. Pre-fork servers: workers accept on one inherited listener, and a connector's
// hello sits in the table of the worker that took its channel, which is not always the
// worker that accepts its TCP connection (docs/shm-rendezvous.md, "Late attach").
//
//   connector (its hello withdrawn)             acceptor (accepted without a hello)
//   LateOffer::open(local, peer)                 ...first receive after its first send:
//     a Unix listener named by the 4-tuple        late_dial(peer, local): connect, hello
//                                                 with a new segment; sends on TCP until
//   LateOffer::take() at a later call: the        the answer
//     hello, answered like a listener's hello
//     (Handshake), switch offset = bytes sent
//     on TCP so far
//
// Roles flip: the accepting process makes the segment and sends the hello (it is the
// segment's side 0), the connecting one attaches and confirms. The switch by offsets of
// design §3 does the rest: each end's offset is the bytes it sent on TCP before.
//
// The name lives in the network namespace's abstract Unix names (none outlives its
// socket) and says the uid of the listener's record. Abstract names have no permissions,
// so each end checks the other:
// - the acceptor dials only an offer made by a process of the record's uid or its own (a
//   pre-fork server's workers often run under another uid than the process that listened);
// - the connector takes a hello only with a proof that its sender holds the accepting end
//   of this very TCP connection (that socket, passed along, whose endpoints mirror this
//   end's): whoever holds it can read and write the stream anyway.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "shm_rendezvous.hpp"
#include "stats_layout.hpp"

namespace fastsock::shm {

// "\0fastsock/1/<uid>/late/<connector>-<acceptor>" (endpoints canonical, in hex) and its
// length; 0 for endpoints that are not IPv4/IPv6 of one family.
socklen_t late_address(const stats::Endpoint& connector, const stats::Endpoint& acceptor,
                       uid_t uid, struct sockaddr_un& out) noexcept;

// The connector's offer. Not thread-safe (the connection's locks serialise it).
class LateOffer {
 public:
  LateOffer() noexcept = default;
  LateOffer(const LateOffer&) = delete;
  LateOffer& operator=(const LateOffer&) = delete;
  ~LateOffer() { close(); }

  // Listens under the name of the TCP connection from `connector` (this end) to
  // `acceptor`, for records of this process's effective uid. 0, or -errno with `why`
  // (-EADDRINUSE: the name is taken).
  int open(const stats::Endpoint& connector, const stats::Endpoint& acceptor,
           const char** why) noexcept;
  // The same for the connected TCP socket `tcp_fd` (this end's).
  int open(int tcp_fd, const char** why) noexcept;
  bool is_open() const noexcept { return listen_fd_ >= 0; }
  // The acceptor's hello, if it came: then `out` holds it (answer with Handshake::accept
  // or reject) and the offer is closed. false while nothing came (or something refused:
  // another uid, a malformed hello; `why` says so and the offer stays open).
  bool take(Handshake& out, const char** why) noexcept;
  void close() noexcept;

 private:
  int listen_fd_ = -1;
  int channel_fd_ = -1;  // accepted, its hello not read yet
  stats::Endpoint connector_{}, acceptor_{};  // canonical
};

// A late hello's descriptors: the segment's memfd, the sender's eventfd, and its TCP
// socket (the proof, closed by the receiver once checked).
inline constexpr int kLateHelloFds = 3;

// The acceptor's side: a channel to the connector's offer for the TCP connection from
// `connector` to `acceptor` (this end), accepted on a listener whose record has
// `record_uid`. The fd (the caller's, an internal descriptor), or -errno with `why`
// (-ECONNREFUSED: no offer, the peer does not run fastsock or did not withdraw a hello).
int late_dial(const stats::Endpoint& connector, const stats::Endpoint& acceptor,
              uid_t record_uid, const char** why) noexcept;

}  // namespace fastsock::shm
