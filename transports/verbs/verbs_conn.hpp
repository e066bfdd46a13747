// One connection on the verbs link: the switch protocol of design §3 over an RC queue
// pair, and TCP's semantics for send/recv over it.
//
// Life of a connection:
//   connector  attach() after the TCP connect: rdma_cm resolution starts (service thread,
//              verbs_cm.hpp); on the route, the queue pair is created and rdma_connect
//              carries the TCP 4-tuple and a nonce.
//   acceptor   attach() at accept(): the connection is announced to the service, which hands
//              it the matching connect request (now or when it arrives); the queue pair is
//              created and the request accepted, echoing the nonce.
//   Until the RDMA connection is established, both ends send on TCP. After it, each end's
//   next send first posts `switch_at` (how many bytes it sent on TCP), then its bytes go on
//   the queue pair; each receiver reads TCP up to the peer's switch offset, then the queue
//   pair. Nothing is ever added to the TCP stream.
//
// Messages are delivered with SEND_WITH_IMM into the receiver's pool of slots, shared by the
// process's connections on the device (verbs_pool.hpp). A sender copies them into
// registered slots of its own, except in a large blocking send, which sends straight from
// the application's buffer (zero-copy, registered through verbs_regcache.hpp) and copies
// into the slots only what the peer has not consumed when the call returns. A sender may have `slots` data messages unconsumed by the
// receiver: its credits, returned in the immediate of every message or in a `credit`
// message. A sent slot stays untouched until the peer has consumed it, so a downgrade can
// resend from it.
//
// When the link fails after a direction switched (a queue-pair error, the peer's queue pair
// gone, the device removed), its sender writes a resync frame (verbs_wire.hpp) on TCP and
// resends from the last byte the receiver acknowledged; the receiver skips what the link
// had delivered. Nothing is lost or duplicated. If the sender cannot know that the peer saw
// its switch (the switch message's completion failed), the connection is reset instead.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>

#include "iov_cursor.hpp"
#include "link_io.hpp"
#include "verbs_cm.hpp"
#include "verbs_regcache.hpp"
#include "verbs_wire.hpp"

namespace fastsock::verbs {

struct ConnOptions {
  uint32_t slots;       // receive slots (= send credits) per direction
  uint32_t slot_bytes;  // bytes per slot
  uint32_t spin_us;     // busy-wait budget before sleeping
  // Blocking sends of at least this many bytes go from the application's buffer
  // (FASTSOCK_VERBS_ZERO_COPY_MIN); 0: never (FASTSOCK_VERBS_ZERO_COPY=0).
  uint32_t zero_copy_min;
};

class Conn final : public CmClient {
 public:
  enum class State : uint8_t {
    connecting,   // RDMA connection in progress; data on TCP
    established,  // the queue pair is up: each direction switches at its next send
    tcp,          // stays on (or went back to) TCP, the reason in fallback_reason()
    broken,       // the link failed after a direction had switched: ECONNRESET
  };

  Conn(Cm& cm, const ConnOptions& options) noexcept;
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // 0, or -errno with `why`: then the connection stays on TCP.
  int start_connector(const TcpKey& key, const char** why) noexcept;
  int start_acceptor(const TcpKey& key, const char** why) noexcept;

  State state() const noexcept { return state_.load(std::memory_order_acquire); }
  const char* fallback_reason() const noexcept { return fallback_reason_; }
  // Nothing of the connection is left on the link: the kernel socket alone carries it.
  bool settled() const noexcept;
  // The link carries at least one direction (for stats).
  bool carrying() const noexcept { return tx_switched_ || peer_switch_known_; }
  // A connection still connecting long after it opened gives up (then true).
  bool stale(int64_t opened_ns, int64_t now_ns) noexcept;
  // The application's descriptor of the TCP socket, for logs and for close() to find it.
  // `mode`: the socket's remembered O_NONBLOCK and timeouts (the Socket outlives us).
  void set_socket(int fd, SocketMode* mode) noexcept;
  // What the stats slot said of the connection (VerbsTransport::note_fallback): each
  // change is noted once. The slot's reason keeps the first `len` bytes (the links skipped
  // before this one) once the link carries the connection.
  bool note_fallback_once() noexcept { return !fallback_noted_.exchange(true, std::memory_order_relaxed); }
  void set_skipped_reasons_len(size_t len) noexcept { skipped_reasons_len_ = len; }
  // The stats slot's fields the connection reports itself in as carried (`carried_id`,
  // the reason cut to the skipped links') once its RDMA connection is up: from the thread
  // that sees it come up (the CM service, or the connector's own), so that a connection
  // idle since is shown right too. Under the progress lock, as every change of state: a
  // fallback, noted after it by note_fallback, always comes last. At once if it is up.
  void report_in(uint8_t* transport, uint8_t carried_id, char* reason) noexcept;

  ssize_t send(int fd, const iovec* iov, int iovcnt, int flags);
  ssize_t recv(int fd, const iovec* iov, int iovcnt, int flags);
  long bytes_readable(int fd) noexcept;
  short poll_now(int fd, short events) noexcept;
  int wait_fds(int fd, short events, pollfd* out) noexcept;
  void after_wait(bool edge_watched) noexcept;
  // Transport::recheck_at: while a wait for room has the peer consuming nothing, when the
  // link is given up (room_wait_expired); 0 otherwise.
  int64_t recheck_at(short events) noexcept;
  int shutdown(int fd, int how) noexcept;
  void downgrade(int fd, const char* why) noexcept;
  // SO_LINGER {1, 0} is set (or cleared): close() then resets, as the kernel does.
  void set_abortive_close(bool abortive) noexcept { abortive_close_ = abortive; }
  // The application closes the connection; `fd` is its descriptor if still open (else -1).
  void close(int fd) noexcept;

  // CmClient (service thread, under Cm::lock()).
  int on_route(rdma_cm_id* id, const char** why) noexcept override;
  void on_connect_started(rdma_cm_id* id) noexcept override;
  int on_request(rdma_cm_id* id, const ConnectData& data, const char** why) noexcept override;
  void on_connect_response(const void* private_data, uint8_t len) noexcept override;
  int on_redirect(uint16_t port, const char** why) noexcept override;
  void on_established() noexcept override;
  bool accepting() const noexcept override { return acceptor_; }
  void on_failed(const char* why) noexcept override;
  void on_disconnected() noexcept override;
  rdma_cm_id* on_device_removal() noexcept override;
  void on_pool_low(bool copy_out) noexcept override;
  void forget_after_fork() noexcept override {
    copy_aside_after_fork();
    forget_device_resources();
  }

 private:
  enum class WaitFor : uint8_t { data, space, sent };
  // Creates the queue pair and its resources on this process's context of id's device,
  // ready to receive (INIT, receives posted). 0 or -errno with `why`.
  int create_qp(rdma_cm_id* id, const char** why) noexcept;
  // Moves the queue pair to `state` with the attributes the connection manager gives.
  int move_qp(rdma_cm_id* id, ibv_qp_state state) noexcept;
  // Both ends: the link is up (under the progress lock).
  void established_locked() noexcept;
  // Writes the stats slot given to report_in as carried by verbs (after report_in only).
  void report_carried_locked() noexcept;
  void destroy_resources() noexcept;
  // Frees what the connection holds on the device (queue pair, completion queue and
  // channel, registration, protection domain), keeping the buffers: received bytes not
  // consumed yet and sent bytes not acknowledged stay readable. Cm::lock() held, and the
  // progress lock; this process's own resources only.
  void free_device_resources() noexcept;
  // Drops the pointers only (a forked child: the resources are its parent's).
  void forget_device_resources() noexcept;
  // Takes completions off the queue (progress lock held).
  void progress_locked() noexcept;
  void progress() noexcept;
  void on_recv(uint32_t slot, uint32_t imm, uint32_t len) noexcept;
  int post_recv(uint32_t slot) noexcept;
  // A received data message, in the receive pool (`slot`) or copied out of it (slot -1,
  // `data` is ours).
  struct RxEntry {
    uint8_t* data;
    uint32_t len;
    int32_t slot;
  };
  // Copies every queued message still in a pool slot into memory of its own and gives the
  // slot back (progress lock held). False if memory ran out.
  bool copy_out_held() noexcept;
  // The message is consumed or dropped: its slot goes back to the pool, or its copy is freed.
  void release(RxEntry& e) noexcept;
  void release_queued() noexcept;  // every queued message (progress lock held)
  // After the queue pair is destroyed: the receive completions left in the completion
  // queue hold pool slots; they go back unread.
  void reclaim_completions() noexcept;
  // Posts a control message of `type` with `payload`. Progress lock held.
  // `lkey` 0: the payload goes inline (at most kControlInline bytes); else it is read from
  // registered memory.
  int post_control(Msg type, const uint8_t* payload, uint32_t len, uint32_t lkey = 0) noexcept;
  int post_data(uint32_t stage_slot, uint32_t len) noexcept;  // from its slot
  // A zero-copy message: sent from the application's bytes at `src`, registered (`lkey`).
  int post_data(uint32_t stage_slot, uint32_t len, const uint8_t* src, uint32_t lkey) noexcept;
  // A zero-copy send's next `len` bytes, if they lie in one piece of the caller's array and
  // can be registered: true, the cursor past them, where they are and their registration
  // in zc_[slot]. False: copy them.
  bool zero_copy_source(IovCursor& in, uint32_t len, uint32_t slot) noexcept;
  // Before send() returns: waits until the device has sent every zero-copy message, then
  // copies those the peer has not consumed into their slots (a resend reads them there)
  // and gives the registrations back.
  void settle_zero_copy(int fd, link_io::Deadline& deadline) noexcept;
  // A send reuses `slot` (or settles): the zero-copy message sent from it before, if any,
  // no longer needs the application's bytes; its registration is given back.
  void forget_zero_copy_slot(uint32_t slot) noexcept;
  // Where a sent message's bytes are: its slot, or still the application's buffer.
  const uint8_t* sent_bytes(uint32_t slot) const noexcept;
  // Every zero-copy message's send completed (or the queue pair is gone). Progress lock.
  bool zero_copy_sent() const noexcept;
  // send() under tx_lock_, without the zero-copy settling.
  ssize_t send_locked(int fd, const iovec* iov, int iovcnt, int flags,
                      link_io::Deadline& deadline);
  // A forked child: the sending thread is gone, the bytes it was sending are in the child's
  // copy of the memory; they go into the slots now (no registration is the child's).
  void copy_aside_after_fork() noexcept;
  // Moves to full-size send slots (every message sent is acknowledged: nothing in the
  // small ones is needed for a resend). Progress lock held.
  void grow_send_slots() noexcept;
  uint32_t take_credits() noexcept;
  void return_credits_if_due() noexcept;
  uint32_t credits_available() const noexcept;
  // Every send request's completion is not taken yet: nothing more can be posted.
  bool sq_full() const noexcept { return sends_in_flight_ >= max_send_wr_; }
  bool can_post_data() const noexcept { return credits_available() > 0 && !sq_full(); }
  void fail(const char* why) noexcept;  // the link is unusable
  // The stream cannot be recovered: both directions report ECONNRESET.
  void break_connection(const char* why) noexcept;
  // Our link stream failed after its switch: queue the resync frame and the resend.
  void start_resync() noexcept;
  // Receive side of a resync: the peer's frame (0 once read whole, -EAGAIN while partial,
  // -ENODATA when the connection ends before its first byte, -errno), then the resent bytes the link had delivered already (1 once skipped, 0 at
  // end of stream, -errno). Receive lock held; take_resync_frame also the progress lock.
  int take_resync_frame(int fd) noexcept;
  int skip_resent(int fd) noexcept;
  // Serves what a failed link left to do on TCP without blocking, in whichever of this
  // connection's locks are free (for callers that are not sending or receiving).
  void serve_resync_nowait(int fd) noexcept;
  // poll_now's part of a resync, when TCP is readable: the peer's frame and the resent
  // bytes already received are not data, so they are taken before readiness is reported
  // (a readable report means bytes for the application). True if it took anything.
  bool take_resync_bytes(int fd) noexcept;
  // Something is owed on TCP before the next bytes we send (resend_due_: even before them).
  bool tx_resync_pending() const noexcept { return resync_frame_left_ > 0 || resend_due_; }
  void post_failed(const char* what, int rc) noexcept;  // logs why, then fail()
  // Whether a waiter for `what` has something to do: ready on the link, or the link's
  // state changed since it looked (`tcp_tx`: our stream went to TCP; `failed`: the link
  // had failed). The TCP socket's readiness is the poll's.
  bool ready_for(WaitFor what, bool tcp_tx, bool failed) noexcept;
  // The link failed: wakes every thread asleep on its wake-up set (progress lock held).
  void wake_waiters() noexcept;
  bool rx_on_tcp() const noexcept;
  // Spins on the link, then sleeps on the link and the TCP socket: 0 when something may
  // have changed (or `until_ns` came, CLOCK_MONOTONIC, 0: none), -EAGAIN at the
  // deadline, or -errno.
  int wait(int fd, WaitFor what, link_io::Deadline& deadline, int64_t until_ns = 0);
  // A send or poll waits for credits (progress lock held): starts the clock, restarts it
  // whenever the peer consumed something, and once it consumed nothing for
  // kStalledLinkNs gives the link up (fail(): both streams go on on TCP, resynced). True
  // then.
  bool room_wait_expired() noexcept;
  void end_room_wait() noexcept;  // the wait is over: room, or the stream left the link
  int64_t recheck_at_locked(short events) const noexcept;
  ssize_t recv_link(const iovec* iov, int iovcnt, bool peek) noexcept;
  // Serves the peer's downgrade: resends on TCP what it did not consume. 0 or -errno.
  // `sending`: the application sends next (a resync frame owed with nothing to resend goes
  // out only then).
  int serve_resend(int fd, bool nonblocking, bool sending) noexcept;
  // Takes (and acknowledges) up to `most` events off the completion channel.
  void drain_channel(unsigned most = UINT_MAX) noexcept;
  // Tells the peer our link stream ended after link_consumed_ bytes (progress lock held).
  void post_downgrade() noexcept;
  // How this end's downgrade stands to the peer's, if the peer leaves the link too
  // (docs/verbs.md, "Both ends at once"):
  //   unknown  the peer's leave word is not known (or could not be read): the old rule,
  //            keep what the peer sent only if it left first (peer_left_)
  //   first    the peer had not started leaving: it takes our downgrade before its own, so
  //            it resends what we did not consume; we drop it
  //   second   the peer left first: we keep what it sent, and resend what it did not consume
  //   crossed  each found the other leaving: each drops what it did not consume and
  //            resends what the other did not consume (`peer_consumed`)
  enum class LeaveOrder : uint8_t { unknown, first, second, crossed };
  // Posts our downgrade and settles the order with the peer's leave word (RDMA READ, no
  // help from the peer's process: an end that found ours set is in its own downgrade and
  // publishes its finding within microseconds). Progress lock held, the link up.
  LeaveOrder leave_order(uint64_t* peer_consumed) noexcept;
  void publish_leave(Leave state) noexcept;
  // Room for one more work request on the send queue, before `end_ns`; false if the link
  // failed or the time ran out. Progress lock held.
  bool send_room(int64_t end_ns) noexcept;
  // serve_resend without blocking for longer than until `end_ns`; the connection is reset
  // if the resend cannot be written by then.
  void serve_resend_within(int fd, int64_t end_ns) noexcept;
  // Reads the peer's leave word into *word, before `end_ns`; false if the read failed.
  // `first_read`: the downgrade's first (a test hook may hold it).
  bool read_peer_leave(int64_t end_ns, uint64_t* word, bool first_read = false) noexcept;
  // Posts our leave word's address and key (when the link comes up). Progress lock held.
  void announce_leave_word() noexcept;

  Cm& cm_;
  const Lib& lib_;
  ConnOptions options_;
  std::atomic<State> state_{State::connecting};
  const char* fallback_reason_ = nullptr;
  pid_t owner_pid_;
  TcpKey key_{};
  uint64_t nonce_ = 0;
  bool acceptor_ = false;
  bool redirected_ = false;  // connector: followed a listener's redirect (at most once)
  bool downgrade_unsent_ = false;  // moved to TCP while the link was coming up
  int log_fd_ = -1;
  // Leaving the link when the peer may be leaving too (leave_order): 32 bytes registered
  // for the peer's RDMA READ — [0] our leave word, [1] the peer's as last read, [2..3] the
  // leave_word message's payload — and where the peer's word is.
  uint64_t* leave_ = nullptr;
  ibv_mr* leave_mr_ = nullptr;
  uint64_t peer_leave_addr_ = 0;
  uint32_t peer_leave_rkey_ = 0;
  bool peer_leave_known_ = false;
  bool leave_read_done_ = false;  // the read of the peer's word completed
  Leave own_leave_ = Leave::on_link;  // what our word says
  std::atomic<bool> fallback_noted_{false};
  uint8_t* report_transport_ = nullptr;  // report_in; progress lock
  uint8_t report_carried_id_ = 0;
  char* report_reason_ = nullptr;
  size_t skipped_reasons_len_ = 0;
  SocketMode* mode_ = nullptr;
  ino_t socket_ino_ = 0;  // the TCP socket's inode: its descriptor may be another at close
  bool still_our_socket(int fd) const noexcept;

  rdma_cm_id* id_ = nullptr;
  ibv_context* context_ = nullptr;  // this process's own (Cm::own_context), while held
  ibv_qp* qp_ = nullptr;  // ours, not librdmacm's (see Cm::own_context)
  ibv_pd* pd_ = nullptr;           // the pool's
  RecvPool* pool_ = nullptr;       // this process's receive pool on the device
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  uint8_t* buffers_ = nullptr;  // send slots
  uint32_t send_slot_bytes_ = 0;  // kFirstSendSlotBytes, then options_.slot_bytes
  bool send_grow_failed_ = false;  // registration refused: the small slots stay
  int wake_fd_ = -1;            // epoll set holding the completion channel: what waiters poll
  uint32_t recv_slots_ = 0;     // fifo room: options_.slots (the peer's credits) + reserve

  std::mutex tx_lock_, rx_lock_;  // threads of this process sharing a direction
  std::mutex progress_lock_;      // the queue pair, the completion queue and the counters

  // Send direction.
  bool tx_switched_ = false;
  bool fin_sent_ = false;
  bool write_shut_ = false;
  // SO_LINGER {1, 0}: close() posts no FIN and resends nothing; the kernel's reset is the
  // end the peer sees (ECONNRESET), as on TCP.
  std::atomic<bool> abortive_close_{false};
  bool tx_back_on_tcp_ = false;  // after a downgrade (either end's), sends go to TCP
  uint64_t tcp_sent_ = 0;        // bytes sent on TCP before the switch
  uint64_t link_sent_ = 0;       // bytes sent on the link
  uint64_t stage_head_ = 0;      // data messages posted
  uint64_t stage_acked_ = 0;     // data messages the peer consumed (credits returned)
  uint64_t acked_bytes_ = 0;     // link bytes in those messages
  uint32_t* stage_len_ = nullptr;
  uint32_t sends_in_flight_ = 0;  // posted sends whose completion is not taken yet
  uint64_t sends_posted_ = 0, sends_done_ = 0;  // all time (completions in order, RC)
  // Zero-copy messages of the send under way (tx_lock_): the application's bytes of each
  // slot not copied into it yet, and their registration.
  struct ZeroCopySlot {
    const uint8_t* src = nullptr;
    RegCache::Ref ref;
  };
  ZeroCopySlot* zc_ = nullptr;
  bool zc_pending_ = false;
  uint64_t zc_last_post_ = 0;     // sends_posted_ after the last zero-copy message
  RegCache::Ref zc_last_ref_;     // the last message's registration (held through zc_)
  uint64_t zc_bytes_ = 0, zc_copied_aside_ = 0;  // for the debug line at close
  uint32_t max_send_wr_ = 0;
  uint32_t inline_max_ = 0;  // data messages up to this many bytes go inline
  bool resend_due_ = false;
  uint64_t resend_from_ = 0;     // the peer consumed this many of our link bytes
  bool switch_confirmed_ = false;  // our switch message reached the peer's queue
  // A wait for credits (room_wait_expired): since when the peer consumed nothing, while
  // stage_acked_ stood at room_wait_acked_; 0 when no such wait is under way (then not
  // counted in Transport::timed_waits).
  std::atomic<int64_t> room_wait_since_{0};
  uint64_t room_wait_acked_ = 0;
  uint8_t resync_frame_[16] = {};  // to write on TCP after a link failure (ResyncFrame)
  uint8_t resync_frame_left_ = 0;  // bytes of it not written yet

  // Receive direction.
  bool peer_switch_known_ = false;
  uint64_t peer_switch_at_ = 0;
  uint64_t tcp_received_ = 0;
  bool peer_fin_ = false;
  bool peer_left_ = false;        // the peer downgraded: its stream goes on on TCP
  bool rx_back_on_tcp_ = false;   // this end downgraded: read TCP only
  bool read_shut_ = false;
  RxEntry* rx_fifo_ = nullptr;    // received data messages in order
  uint32_t rx_head_ = 0, rx_tail_ = 0;  // fifo positions (mod recv_slots_)
  uint32_t rx_offset_ = 0;        // bytes of the head slot already consumed
  uint64_t link_received_ = 0;    // link bytes received (in the fifo or consumed)
  uint64_t link_consumed_ = 0;
  uint32_t unreported_credits_ = 0;
  bool peer_resynced_ = false;    // the peer's link failed: its stream goes on on TCP
  uint8_t frame_in_[16] = {};     // its resync frame, as read so far
  uint8_t frame_in_got_ = 0;
  uint64_t tcp_skip_ = 0;         // resent bytes on TCP that the link delivered already
  bool link_error_ = false;
};

}  // namespace fastsock::verbs
