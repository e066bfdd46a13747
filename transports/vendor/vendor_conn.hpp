// One connection on the vendor link: the offset switch of design §3 over a vendor
// library's stream socket, and TCP's semantics for send/recv over it.
//
// Life of a connection:
//   connector  attach() after the TCP connect: the service connects through the library
//              and sends the Hello (vendor_wire.hpp); the acceptor's Reply links it.
//   acceptor   attach() at accept(): the services of the listener's profiles are told; a
//              Hello for this 4-tuple, come or to come, links it.
//   Until linked, both ends send on TCP. After it, each end's next send first writes a
//   Switch header (its TCP byte count) on the vendor connection, then raw bytes; the
//   receiver reads TCP up to that count, then the vendor connection. An end that reads the
//   peer's Switch before its own header is out writes an Ack first.
//
// Leaving the link deliberately (Transport::downgrade): a sender whose stream switched
// writes a ResyncFrame on TCP right after its switch offset, giving the vendor byte count —
// only once the peer's Ack says it read the Switch (else it could take the frame for
// data): without the Ack the connection is reset. One that had not switched writes a
// Leave header on the vendor connection so that the peer never switches. The receiving
// direction can leave cleanly only when the peer's stream is not on the link (the library
// holds its bytes; nothing keeps a copy to resend): otherwise the connection is reset. A
// vendor connection that fails after a stream switched resets the connection too
// (ECONNRESET both ends: the TCP connection is reset). docs/vendor.md, "Failure".
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "link_io.hpp"
#include "vendor_service.hpp"

namespace fastsock::vendors {

class Conn final : public ServiceClient {
 public:
  enum class State : uint8_t {
    connecting,  // the handshake runs; data on TCP
    linked,      // the vendor connection is up: each direction switches at its next send
    tcp,         // stays on (or went back to) TCP, the reason in reason()
    broken,      // reset: ECONNRESET
  };
  static constexpr int kMaxServices = 8;

  Conn() noexcept;
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // `fd` is the application's TCP socket. 0, or -errno with `why`.
  int start(int fd, bool acceptor, const TcpKey& key, const stats::Endpoint& dst,
            Service* const* services, int count, const char** why) noexcept;

  State state() const noexcept { return state_.load(std::memory_order_acquire); }
  const char* reason() const noexcept { return reason_; }
  // A direction's stream is on the link (ours switched, or we read the peer's Switch).
  bool carried() const noexcept { return carried_.load(std::memory_order_relaxed); }
  const char* profile_name() const noexcept { return svc_ ? svc_->profile().name.c_str() : "?"; }
  // For the stats slot: whether the fallback was reported, and (once) reporting it.
  bool fallback_noted() const noexcept { return fallback_noted_.load(std::memory_order_relaxed); }
  bool note_fallback_once() noexcept { return !fallback_noted_.exchange(true, std::memory_order_relaxed); }
  // How much of the stats slot's reason the links skipped before vendor wrote.
  void set_skipped_reasons_len(size_t len) noexcept { skipped_reasons_len_ = len; }
  size_t skipped_reasons_len() const noexcept { return skipped_reasons_len_; }
  // Nothing of the connection is left on the link: the kernel socket alone carries it.
  bool settled() noexcept;

  ssize_t send(int fd, const iovec* iov, int iovcnt, int flags);
  ssize_t recv(int fd, const iovec* iov, int iovcnt, int flags);
  long bytes_readable(int fd) noexcept;
  short poll_now(int fd, short events) noexcept;
  int wait_fds(int fd, short events, pollfd* out) noexcept;
  void after_wait(bool edge_watched) noexcept;
  int shutdown(int fd, int how) noexcept;
  void downgrade(int fd, const char* why) noexcept;
  // The application closes the connection.
  void close() noexcept;

  // ServiceClient (service thread, under the service's lock).
  void on_linked(int profile, int vfd) noexcept override;
  void on_link_failed(int profile, const char* why, int err, bool retrying) noexcept override;
  void on_ready() noexcept override;

 private:
  enum class Peer : uint8_t { unknown, switched, left };
  void notify() noexcept;
  // Moves to TCP (deliberately or after the handshake failed); state lock held.
  void to_tcp_locked(const char* why) noexcept;
  // Resets the connection: both ends see ECONNRESET (the TCP connection is reset too).
  void reset(int fd, const char* why) noexcept;
  // Ends our vendor stream (SHUT_WR through the service), before TCP's end; logs when the
  // library did not finish in time.
  void end_vendor_stream() noexcept;
  // Reads the peer's stream header if it is there (rx lock held). False if the vendor
  // connection ended or failed before it.
  void take_peer_header(int fd) noexcept;
  // Reads one whole stream header into header_in_: false while it is incomplete, or when
  // the vendor connection ended or failed (handled here).
  bool read_peer_header(int fd) noexcept;
  // Writes a whole stream header of `kind` (tx lock held, none of our stream written yet).
  // False when it could not; a header written in part resets the connection.
  bool send_header(int fd, wire::Kind kind, uint64_t offset) noexcept;
  // Writes the Ack of the peer's Switch if one is due and our own header is not out yet.
  void send_ack_if_due(int fd) noexcept;
  // The peer left the link (its Leave header or ResyncFrame, or `ended`: the vendor
  // connection ended before its header): our stream leaves too.
  void peer_left(int fd, bool ended) noexcept;
  // Reads the peer's ResyncFrame from TCP: 1 whole, 0 end of stream, -errno.
  int take_resync_frame(int fd) noexcept;
  bool rx_on_vendor() const noexcept;
  bool tx_on_vendor() const noexcept { return tx_switched_ && !tx_left_; }
  short vendor_revents(short events) noexcept;  // poll with timeout 0
  ssize_t vendor_send(const iovec* iov, int iovcnt) noexcept;
  ssize_t vendor_recv(const iovec* iov, int iovcnt, bool peek) noexcept;
  // Sleeps until the vendor connection has `vendor_events`, TCP has `tcp_events`, the
  // link's state changes, or the socket's deadline. 0 or -errno.
  int wait(int fd, short vendor_events, short tcp_events, link_io::Deadline& deadline);
  // Asks the link to watch `vendor_events` and whatever the threads asleep in wait() need
  // (sleepers_): the service keeps one event set per connection, and a set that named
  // only the last waiter's events left a reader and a writer thread asleep for good.
  short arm(short vendor_events) noexcept;
  // A blocking wait just took the connection's notification (one eventfd, drained by
  // whichever waiter wakes first): re-arms what the waiters still asleep need and, if
  // one of them can go on now, wakes it (shm's pass_on_signal does the same).
  void pass_on_wakeup() noexcept;
  void drain_notifications() noexcept;
  // A non-blocking call would block on the link: the events a poll/epoll waiter armed
  // were computed before this call moved a direction onto the link (an edge-triggered
  // waiter would sleep through the link's bytes), so the link watches these too. Always
  // armed again: the service's watch ends at its first wake-up, which waiter_events_ does
  // not record, so "armed already" from it may be stale.
  void watch_for_waiter(short vendor_events) noexcept;

  std::atomic<State> state_{State::connecting};
  std::atomic<bool> carried_{false};
  std::atomic<bool> fallback_noted_{false};
  std::atomic<bool> ack_due_{false};  // the peer's Switch was read; our Ack is not out yet
  char reason_[112] = {};
  size_t skipped_reasons_len_ = 0;
  pid_t owner_pid_;
  bool acceptor_ = false;
  int log_fd_ = -1;
  Service* services_[kMaxServices] = {};
  int service_count_ = 0;
  int waiting_on_ = 0;     // acceptor: services that may still link it
  Service* svc_ = nullptr;  // the profile's service that linked it
  const Api* api_ = nullptr;
  bool poll_readiness_ = false;
  int vfd_ = -1;
  int notify_ = -1;  // eventfd: the link's state changed, or an armed descriptor is ready
  int wake_ = -1;    // epoll set of notify_ and (readiness=fd) vfd_: what waiters poll
  short vfd_events_ = 0;  // what wake_ watches on vfd_ now
  std::atomic<short> waiter_events_{0};  // what the last poll/epoll waiter armed on vfd_
  // Threads asleep in wait() for the link's POLLIN ([0]) and POLLOUT ([1]).
  std::atomic<int> sleepers_[2] = {};

  std::mutex state_lock_, tx_lock_, rx_lock_;

  // Send direction (tx lock; the two flags are also read without it, by waiters).
  std::atomic<bool> tx_switched_{false};
  std::atomic<bool> tx_left_{false};
  // shutdown(SHUT_WR) was called: sends fail with EPIPE, as on the kernel socket (a send
  // must not switch to the vendor link after it, where the peer would read on).
  bool write_shut_ = false;
  uint64_t tcp_sent_ = 0;
  uint64_t vendor_sent_ = 0;
  uint8_t header_out_[sizeof(wire::StreamHeader)] = {};
  uint8_t header_left_ = 0;

  // Receive direction (rx lock).
  // shutdown(SHUT_RD) was called: a read that finds nothing waiting is the end of stream,
  // as on the kernel socket (whose own end of stream must not pass for a dead peer's).
  bool read_shut_ = false;
  Peer peer_ = Peer::unknown;
  bool peer_acked_ = false;  // the peer read our Switch: a resync frame may follow it on TCP
  uint8_t header_in_[sizeof(wire::StreamHeader)] = {};
  uint8_t header_got_ = 0;
  uint64_t peer_switch_at_ = 0;
  uint64_t tcp_received_ = 0;
  uint64_t vendor_received_ = 0;
  uint8_t frame_in_[sizeof(wire::ResyncFrame)] = {};
  uint8_t frame_got_ = 0;
  bool peer_resynced_ = false;  // its frame read: its vendor stream ends at peer_vendor_end_
  uint64_t peer_vendor_end_ = 0;
  bool rx_left_ = false;        // this end left: the peer's stream is read on TCP only
  bool vendor_eof_ = false;
  int64_t tcp_eof_ns_ = 0;      // when TCP ended while the vendor stream had not
};

}  // namespace fastsock::vendors
