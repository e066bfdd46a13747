// One connection carried (or about to be carried) by shared memory: the state of the switch
// protocol of design §3 for both directions, and the TCP-compatible send/recv over it.
//
// Life of a connection, connector side (side 0):
//   prepare()  before the SYN: the listener's rendezvous record is dialled (shm_rendezvous),
//              segment and eventfd made (or reused from the channel's pool), hello sent.
//   start_connector()  after connect(): the connection's local endpoint sent (`where`);
//              phase `awaiting_peer`. Until the acceptor confirms, this end sends on TCP.
//   The acceptor confirms by publishing its own switch offset in the segment (after its
//   reply, which carries its eventfd, is already queued); the connector notices that with
//   one load on its next call, collects the reply, and becomes `active`.
// Acceptor side (side 1): start_acceptor() at accept(): attaches the segment from the
//   connector's hello, replies with its eventfd, publishes switch offset 0 (it has sent
//   nothing on TCP yet) and is `active` at once.
// In `active`, each end's first send on shm publishes how many bytes it had sent on TCP
// (its switch offset); each end's receiver reads TCP up to the peer's switch offset, then the
// ring. No byte is ever added to the TCP stream, so a peer without fastsock sees plain TCP.
//
// If the peer rejects, vanishes, or never answers, the connection is `tcp`: every call
// goes to the kernel socket, exactly as without the library.
//
// Late attach (shm_rendezvous_late.hpp): a connection accepted by a process without its
// hello (a listener shared after fork) can still move to shm. The connector, once it has
// withdrawn its hello, offers a late attach; the acceptor (start_late_acceptor) counts its
// TCP bytes and, at its first receive after its first send, dials the offer with a new
// segment of its own (so it is side 0 from then on) and awaits the answer like a connector;
// the connector attaches at its next call, as an acceptor whose switch offset is the bytes
// it already sent on TCP.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <atomic>
#include <mutex>

#include "shm_control.hpp"
#include "shm_handoff.hpp"
#include "shm_notify.hpp"
#include "shm_pool.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_late.hpp"
#include "shm_ring.hpp"
#include "shm_segment.hpp"
#include "socket_mode.hpp"
#include "stats_layout.hpp"

namespace fastsock::shm {

struct ConnOptions {
  Limits limits;
  size_t handoff_threshold;  // messages of at least this many bytes go by handoff
  uint32_t spin_us;          // busy-wait budget before sleeping
};

class Conn {
 public:
  enum class Phase : uint8_t {
    dialled,        // connector: the record answered; the TCP connect comes next
    awaiting_peer,  // connector: hello sent, the acceptor has not confirmed yet
    active,         // both ends attached
    tcp,            // stays on TCP (the reason is in the stats slot)
    broken,         // the peer broke the protocol or the segment: ECONNRESET from now on
  };

  // `mode`: what the core remembers of the socket's O_NONBLOCK, timeouts and close-on-exec
  // flag (socket_mode.hpp); it outlives the connection (it is the Socket's).
  Conn(const ConnOptions& options, SocketMode& mode) : options_(options), mode_(&mode) {}
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn();

  // Connector, before the TCP connect of `fd` (to `dst`). 0, or -errno with `why`.
  int prepare(int fd, const sockaddr* dst, socklen_t len, const char** why);
  // Connector, after the TCP connect of `fd` started. 0, or -errno with `why` (then the
  // connection stays on TCP).
  int start_connector(int fd, const char** why);
  // Acceptor, with the connector's handshake found by the listener. 0 or -errno + `why`.
  // `fd` is the accepted socket (its close-on-exec flag decides whether the memfd is kept,
  // see keep_memfd_for).
  int start_acceptor(Handshake& handshake, const char** why, int fd = -1);
  // Acceptor without a hello on a shared listener, from `peer` on `local`: stays on TCP
  // (`why`) and looks for a late-attach offer at its first receive after its first send.
  void start_late_acceptor(const stats::Endpoint& peer, const stats::Endpoint& local,
                           uid_t record_uid, const char* why);
  // True once after a late attach changed the descriptors wait_fds gives (the epoll
  // registrations must follow: epoll_merge::rewatch).
  // (Asked after every send and recv: a load, and the exchange only once set.)
  bool take_late_change() {
    return late_change_.load(std::memory_order_relaxed) &&
           late_change_.exchange(false, std::memory_order_relaxed);
  }

  Phase phase() const { return phase_; }
  // Set when the phase changed to `tcp` after attach: why (for the stats slot).
  const char* fallback_reason() const { return fallback_reason_; }

  ssize_t send(int fd, const iovec* iov, int iovcnt, int flags);
  ssize_t recv(int fd, const iovec* iov, int iovcnt, int flags);
  // The typed API's element type out of band (Transport::typed): a send marks its bytes
  // (Control::mark_typed), a receive expects `type` over its next `bytes` until it ends.
  // Only while the direction is on shm; otherwise nothing is marked or checked.
  int typed(bool begin, bool sending, uint8_t type, uint64_t bytes);
  long bytes_readable(int fd);
  short poll_now(int fd, short events);
  int wait_fds(int fd, short events, pollfd* out);
  // Transport::recheck_at: while a poll or epoll wait for POLLOUT watches a ring without
  // room, when poll_now would move the direction to TCP if the reader still takes nothing.
  int64_t recheck_at(short events) const;
  // The scheduling hint of Notifier::peer_on_my_cpu (false unless on shm).
  bool peer_on_my_cpu() { return phase_ == Phase::active && notifier_.peer_on_my_cpu(); }
  // After a poll/epoll wait (Transport::disarm): takes the peer's signals. Watched
  // edge-triggered, only when the peer announced one (Notifier::drain_if_signalled).
  void after_wait(bool edge_watched);
  int shutdown(int fd, int how);
  // This end moves the connection to TCP for good (fork, exec, fdopen, passing the
  // descriptor): its ring stream ends, and the peer resends on TCP what this end did not
  // read (design §3, downgrade by offsets). Nothing is lost or duplicated.
  void downgrade(int fd, const char* why);
  // Nothing of the connection is left in shared memory or in this object: the kernel
  // socket alone carries it from now on.
  bool settled() const {
    return phase_ == Phase::tcp && !resending_ && leftover_pos_ == leftover_len_ &&
           !late_dial_ && !late_offer_due_ && !late_offer_.is_open();
  }

  // exec into a program that runs the library (src/exec_handover.hpp; shm/shm_conn_exec.cc).
  // exec_handover: if the connection can continue in the new image as it is (both
  // directions on shm, nothing under way that only this image could finish, the segment's
  // memfd still open), writes the token, makes the memfd and both eventfds inheritable and
  // holds both locks until exec_failed(); returns the token's length, else 0 (nothing held).
  size_t exec_handover(char* out, size_t cap);
  void exec_failed();
  // In the new image: the connection as the token describes it, on socket `fd`. 0, or
  // -errno with `why`.
  int adopt(int fd, const char* token, const char** why);

  // The last descriptor closes: FIN on shm for the peer, after every byte already sent
  // (unless SO_LINGER {1, 0} asked for a reset).
  void close();
  void set_abortive_close(bool abortive) { abortive_close_ = abortive; }

 private:
  bool connector() const { return side_ == 0; }
  // Borrows `slot` of `pool` (referenced by the caller for this connection).
  void use_slot(Pool* pool, PoolSlot* slot);
  int make_segment(const char** why);
  void drop_segment();

  // Connector: collects the acceptor's reply once it has confirmed (or failed). Returns
  // true when the phase changed.
  bool check_peer();
  void check_peer_cheap();
  // poll_now while the acceptor's answer is awaited and nothing confirmed it: every byte
  // goes by TCP, so one poll() of the socket and the rendezvous channel answers. False
  // when the channel has something (the reply, a rejection, its end) or the confirmation
  // came: check_peer must take it first.
  bool poll_awaiting(int fd, short events, short& rev);
  void acceptor_sent_on_tcp();
  // Late attach. late_step runs at the start of send (`receiving` false) and recv with that
  // call's lock held, and does its part only if it gets the other lock too.
  void late_step(int fd, bool receiving);
  void late_dial(int fd);     // the acceptor's part
  void open_late_offer(int fd);  // the connector's, at its first send after its withdrawal
  void late_accept(int fd);   // ... and at its next calls
  void cancel_late();         // no late attach for this connection (any more)
  // Gives back the pooled slot (or closes the segment of its own) and both eventfds.
  void release_segment();
  // The rings, handoffs and controls of the segment as side `side`.
  void map_sides(int side);
  void fall_back(const char* why);
  // The segment's memfd stays open while the socket `fd` is inherited by exec (not
  // close-on-exec) and descriptors are plentiful (fd_budget::room_for_exec): a connection
  // can continue in an exec'd image only with it. Otherwise it is closed once mapped and
  // passed, saving a descriptor per connection.
  void keep_memfd_for(int fd);
  // This end's stream continues on TCP after its last ring byte (the peer reads the ring
  // empty first); resends first what the peer asked for, if it asked. Send lock held.
  void move_tx_to_tcp(int fd);
  // The peer broke the protocol or the segment: ECONNRESET from now on, with the reason.
  void break_connection(const char* why);
  // Bytes the peer still sends on TCP before its switch, or UINT64_MAX while unknown.
  uint64_t tcp_bytes_due();
  enum class WaitFor : uint8_t { data, space, handoff };
  // The bell is one eventfd per side, shared by this process's waiters of both kinds (a
  // thread in recv and one in send on the same connection): the one that drains a signal
  // meant for the other kind passes it on (`waiter_kind` -1: a poll/epoll waiter).
  void pass_on_signal(int waiter_kind);
  static int kind_of(WaitFor what) { return what == WaitFor::data ? 0 : 1; }
  bool ready_for(WaitFor what);
  // What to watch on the TCP socket while waiting (0: nothing).
  short tcp_watch(bool for_data);
  // The peer moved its stream to TCP and the ring is empty: read TCP from now on. True
  // when that just happened.
  bool note_peer_downgrade();
  // The peer asked for a downgrade: resend on TCP what it did not consume, then send on
  // TCP. 0, or -EAGAIN (non-blocking, not done yet), or -errno.
  int serve_resend(int fd, int flags);
  void serve_resend_if_asked(int fd);
  // The peer left the ring before this end's downgrade: its last ring bytes move into
  // leftover_, served after the peer's pre-switch TCP bytes and before the rest of TCP.
  void keep_ring_leftover();
  // Whether poll_now reports POLLOUT for the ring: this direction on shm, and half the
  // ring free (or a send would fail at once: shut down, reader gone).
  bool ring_room_now();
  // poll_now for POLLOUT with the ring short of room: the stalled-ring rule of send() for a
  // program that waits in poll/epoll instead. True when the reader took nothing for
  // kStalledRingNs and this direction moved to TCP.
  bool reader_stalled(int fd);
  void end_room_wait();
  // recv() for a connection on TCP that may still have leftover bytes.
  ssize_t recv_tcp(int fd, const iovec* iov, int iovcnt, int flags);
  bool dead_peer(int fd);
  // Sleeps until `what` is ready or the TCP socket changes, after the spin budget, until
  // the deadline (SO_RCVTIMEO/SO_SNDTIMEO). 0, -EAGAIN (timeout), -EINTR.
  int wait(std::unique_lock<std::mutex>& lock, int fd, WaitFor what, bool has_deadline,
           int64_t deadline_ns);
  // The kernel socket's view: 0 = EOF, >0 = data waiting, -EAGAIN = nothing, other -errno.
  ssize_t tcp_peek(int fd);

  ConnOptions options_;
  SocketMode* mode_;
  std::atomic<Phase> phase_{Phase::tcp};
  int side_ = 0;
  const char* fallback_reason_ = nullptr;

  Dialer dialer_;
  Segment segment_;         // an unpooled connection's own segment
  Segment* seg_ = &segment_;  // the segment in use: segment_ or the pooled slot's
  // A pooled segment (shm_pool.hpp): the slot and its pool, referenced by this connection,
  // which borrows the segment and both eventfds (own_bell_, peer_bell_) from the slot.
  Pool* pool_ = nullptr;
  PoolSlot* slot_ = nullptr;
  SlotOp slot_op_ = SlotOp::unpooled;
  bool slot_confirmed_ = false;  // connector: the acceptor accepted this slot
  bool hello_withdrawn_ = false;  // connector: another process accepted (Dialer::withdraw)
  // Late attach: the acceptor's dial is still to come (late_step says when), to the connector whose TCP endpoint is late_peer_ from late_local_.
  bool late_dial_ = false;
  bool late_ = false;  // the handshake under way or done is a late one
  uint64_t late_mark_ = UINT64_MAX;  // bytes received at its first receive after a send
  stats::Endpoint late_peer_{}, late_local_{};
  uid_t late_uid_ = 0;  // the listener record's
  bool late_offer_due_ = false;  // the connector offers at its next send
  LateOffer late_offer_;       // the connector's, open while its calls look for a dial
  int late_looks_left_ = 0;    // calls that still look before the offer is withdrawn
  std::atomic<bool> late_change_{false};
  RingProducer tx_;
  RingConsumer rx_;
  HandoffSender handoff_out_;
  HandoffReceiver handoff_in_;
  Notifier notifier_;
  Control tx_control_, rx_control_;
  int own_bell_ = -1;
  int peer_bell_ = -1;

  std::mutex send_lock_, recv_lock_;  // threads of this process sharing the connection
  std::atomic<int> sleepers_[2] = {};  // threads asleep in wait(): for data, for room
  std::mutex peer_lock_;              // the connector's collection of the acceptor's reply
  char reason_[112] = {};
  uint64_t tcp_sent_ = 0;             // bytes this end sent on TCP before switching
  uint64_t tcp_received_ = 0;         // bytes received on TCP from the peer
  bool tx_switched_ = false;
  bool write_shut_ = false;
  bool read_shut_ = false;
  bool abortive_close_ = false;
  // After a downgrade by the peer, each direction moves to TCP on its own.
  std::atomic<bool> tx_tcp_{false}, rx_tcp_{false};
  uint64_t shm_sent_ = 0;     // stream bytes sent on shm (ring and handoff)
  bool resending_ = false;    // serving the peer's downgrade request
  char* leftover_ = nullptr;
  size_t leftover_len_ = 0, leftover_pos_ = 0;
  uint64_t leftover_after_tcp_ = 0;  // TCP bytes that come before the leftover
  uint64_t resend_next_ = 0;  // ring counter of the next byte to resend
  unsigned calls_since_check_ = 0;
  // The typed receive in progress: its element type (0: none) and the end of its bytes in
  // shm stream bytes (rx_.consumed()).
  // The acceptor's eventfd never arrived (check_peer): this end reads the ring but sends on
  // TCP, since it cannot wake the acceptor.
  bool peer_bell_missing_ = false;
  bool exec_held_ = false;  // exec_handover holds both locks
  // A poll/epoll wait for room (reader_stalled): since when the ring has had no room while
  // its reader's head stood at room_wait_head_; 0 when no such wait is under way. Written
  // under the send lock.
  std::atomic<int64_t> room_wait_since_{0};
  // recv() on an empty ring asks the kernel socket (a dead peer's end) only when a
  // readiness check saw it readable (tcp_news_), after a wait, or at every
  // kTcpLookEvery-th empty look (empty_looks_, under the receive lock).
  static constexpr unsigned kTcpLookEvery = 16;
  std::atomic<bool> tcp_news_{false};
  unsigned empty_looks_ = 0;
  uint64_t room_wait_head_ = 0;
  uint8_t expect_type_ = 0;
  uint64_t expect_end_ = 0;
  // Whether the typed marks disagree with expect_type_ over the next `want` bytes.
  bool typed_mismatch(size_t want);
};

}  // namespace fastsock::shm
