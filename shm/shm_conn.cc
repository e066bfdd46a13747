#include "shm_conn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "cancel_point.hpp"
#include "endpoint.hpp"
#include "fd_budget.hpp"
#include "internal_fds.hpp"
#include "link_io.hpp"
#include "log.hpp"
#include "real.hpp"
#include "shm_process.hpp"
#include "shm_sys.hpp"
#include "signal_restart.hpp"
#include "transport.hpp"

namespace fastsock::shm {

namespace {

constexpr uint64_t kUnknown = UINT64_MAX;  // the peer has not switched yet: all TCP so far
// How long a blocking send waits for the reader to take bytes of a handoff (to start, or
// to go on) before it sends the rest through the ring (see send()).
constexpr int64_t kHandoffPatienceNs = 2'000'000;
// How long a blocking send waits on a full ring whose reader takes nothing before its
// direction moves to TCP (see send()).
constexpr int64_t kStalledRingNs = 250'000'000;

using link_io::iov_total;
using link_io::kernel_recv;
using link_io::kernel_send;
using link_io::nonblocking;
using link_io::now_ns;
using link_io::SpinBudget;
using link_io::socket_deadline;

// Small on purpose: these run on the application's stack, whose threads may have little.
// A call with more elements moves the bytes of the first kIovChunk (after what it already
// moved) and loops or returns a short count, as the kernel may.
constexpr int kIovChunk = 16;

// The part of `iov` after its first `skip` bytes, at most `max` bytes long, in `out` (at
// most kIovChunk elements).
int iov_window(const iovec* iov, int iovcnt, size_t skip, size_t max, iovec* out) {
  int n = 0;
  for (int i = 0; i < iovcnt && max > 0 && n < kIovChunk; ++i) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    const size_t len = std::min(iov[i].iov_len - skip, max);
    out[n++] = iovec{static_cast<char*>(iov[i].iov_base) + skip, len};
    max -= len;
    skip = 0;
  }
  return n;
}

}  // namespace

Conn::~Conn() {
  end_room_wait();
  std::free(leftover_);
  release_segment();
}

void Conn::release_segment() {
  if (slot_) {
    // The segment and both eventfds are the pool's: the slot goes back (or leaves the
    // pool, see shm_pool.hpp); on the acceptor's side this marks it released. A connector's
    // slot that the acceptor did not take with a usable answer (rejected, no reply, no
    // eventfd, hello never sent) leaves the pool: its state on the other side is unknown.
    if (side_ == 0 && !slot_confirmed_) {
      // A withdrawn hello's reused slot was never taken by the acceptor: still its to reuse.
      if (hello_withdrawn_ && slot_op_ == SlotOp::reuse)
        pool_->withdrawn(slot_);
      else
        pool_->forget(slot_);
    }
    pool_->release(slot_, side_);
    pool_->unref();
    slot_ = nullptr;
    pool_ = nullptr;
  } else {
    // Forgotten before closed: the number may be reused at once (internal_fds.hpp).
    internal_fds::remove(own_bell_);
    internal_fds::remove(peer_bell_);
    if (own_bell_ >= 0) sys::close(own_bell_);
    if (peer_bell_ >= 0) sys::close(peer_bell_);
  }
  own_bell_ = peer_bell_ = -1;
  segment_ = Segment();
  seg_ = &segment_;
  slot_op_ = SlotOp::unpooled;
}

void Conn::map_sides(int side) {
  side_ = side;
  tx_ = RingProducer(*seg_, side, options_.limits.max_window);
  rx_ = RingConsumer(*seg_, 1 - side);
  handoff_out_ = HandoffSender(*seg_, side);
  handoff_in_ = HandoffReceiver(*seg_, 1 - side);
  tx_control_ = Control(*seg_, side);
  rx_control_ = Control(*seg_, 1 - side);
}

void Conn::use_slot(Pool* pool, PoolSlot* slot) {
  pool->ref();
  pool_ = pool;
  slot_ = slot;
  seg_ = &slot->segment;
  own_bell_ = slot->own_bell;
  peer_bell_ = slot->peer_bell;
}

int Conn::prepare(int fd, const sockaddr* dst, socklen_t len, const char** why) {
  side_ = 0;
  // The hello goes before the SYN: when the acceptor's accept() returns, it is there. A
  // kept channel whose listener closed or dropped it fails the send at once: its segment is
  // given up and the next channel (finally a new one) tried. Nothing is on TCP yet.
  uint64_t cookie = 0;
  for (int attempt = 0; attempt < Dialer::kMaxDials; ++attempt) {
    if (int rc = dialer_.dial(dst, len, why); rc < 0) return rc;
    // The hello names this socket by its cookie (the acceptor asks sock_diag for its
    // peer's). Asked only once a listener was found: a connect to a server without
    // fastsock pays nothing for it.
    if (cookie == 0 && (cookie = socket_cookie(fd)) == 0) {
      *why = "the kernel gives no socket cookie (SO_COOKIE)";
      return -ENOPROTOOPT;
    }
    if (int rc = make_segment(why); rc < 0) return rc;
    const int fds[2] = {seg_->fd(), own_bell_};
    const int nfds = slot_op_ == SlotOp::reuse ? 0 : 2;
    const int rc = dialer_.send_hello(cookie, fds, nfds, why);
    if (rc == 0) {
      phase_ = Phase::dialled;
      return 0;
    }
    drop_segment();
    if (rc != -ESTALE) return rc;
  }
  *why = "every kept rendezvous channel was closed by its listener";
  return -ECONNREFUSED;
}

// Undoes make_segment, for a hello that could not be sent: nobody else knows the segment.
void Conn::drop_segment() {
  if (slot_) {
    pool_->forget(slot_);
    pool_->release(slot_, side_);
    pool_->unref();
    slot_ = nullptr;
    pool_ = nullptr;
    own_bell_ = peer_bell_ = -1;  // the slot's
  } else {
    internal_fds::remove(own_bell_);
    if (own_bell_ >= 0) sys::close(own_bell_);
    own_bell_ = -1;
  }
  segment_ = Segment();
  seg_ = &segment_;
  slot_op_ = SlotOp::unpooled;
}

// The segment and this end's eventfd for the hello: a segment of the channel's pool first
// (a released one costs no system call; an eventfd is drained only where a signal was
// left), a new one is kept (shm_pool.hpp); else one of its own.
int Conn::make_segment(const char** why) {
  if (Pool* pool = dialer_.pool()) {
    Status st;
    const Pool::Pick pick = pool->pick(options_.limits, st);
    if (!st.ok()) {
      *why = st.reason;
      return -st.err;
    }
    if (pick.slot) {
      use_slot(pool, pick.slot);
      slot_op_ = pick.op;
      dialer_.set_slot(pick.op, pick.slot->id);
      return 0;
    }
  }
  if (Status st = segment_.create(options_.limits); !st.ok()) {
    *why = st.reason;
    return -st.err;
  }
  own_bell_ = internal_fds::take(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (own_bell_ < 0) {
    *why = "cannot create an eventfd";
    return -errno;
  }
  return 0;
}

int Conn::start_connector(int fd, const char** why) {
  if (phase_ != Phase::dialled) {
    *why = "no fastsock listener";
    return -ECONNREFUSED;
  }
  LOG_DEBUG("fd=%d shm: segment %s", fd,
            slot_op_ == SlotOp::reuse   ? "reused from the channel's pool"
            : slot_op_ == SlotOp::fresh ? "new, kept in the channel's pool"
                                        : "of its own (not pooled)");
  keep_memfd_for(fd);
  map_sides(0);
  // The acceptor's eventfd comes with its reply (or is the slot's, on a reuse): until then
  // this end can arm (the acceptor signals it) but not signal.
  notifier_ = Notifier(*seg_, 0, own_bell_, -1);
  phase_ = Phase::awaiting_peer;
  // Where the connection comes from: an acceptor that has not accepted it yet matches it
  // by address; one that has (it preempted this connect, on this CPU) asked sock_diag.
  // Only a shortcut: the hello is out, so the acceptor may have attached already, and only
  // its reply (or its going) decides; a `where` that cannot be sent changes nothing. Not
  // sent at all when the acceptor has confirmed already (its reply is queued): the
  // listener takes the channel's next hello in its place (Listener::read_channel), and
  // this end saves getsockname and the message, and the acceptor a read.
  if (uint64_t offset; !rx_control_.switch_offset(offset)) {
    sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    const char* ignored;
    if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0)
      (void)dialer_.send_where(endpoint_from(reinterpret_cast<sockaddr*>(&ss), sl), &ignored);
  }
  return 0;
}

void Conn::keep_memfd_for(int fd) {
  const int cloexec = fd >= 0 ? mode_->close_on_exec(fd) : -1;
  if (cloexec != 0 || !fd_budget::room_for_exec(fd))
    seg_->close_fd();
  else
    seg_->keep_fd(internal_fds::take, internal_fds::remove);
}

int Conn::start_acceptor(Handshake& handshake, const char** why, int fd) {
  side_ = 1;
  phase_ = Phase::tcp;
  const char* ignored;
  const Hello& hello = handshake.hello();
  Pool* pool = handshake.pool();
  if (hello.slot_op != SlotOp::unpooled && !pool) {
    *why = "no pool for this channel";
    (void)handshake.reject(*why, &ignored);
    return -ENOMEM;
  }
  if (hello.slot_op == SlotOp::reuse) {
    PoolSlot* slot = pool->take_reused(hello.slot, why);
    if (!slot) {
      (void)handshake.reject(*why, &ignored);
      return -EBUSY;
    }
    use_slot(pool, slot);
  } else {
    const int memfd = handshake.fds().take(0);
    const int bell = handshake.fds().take(1);
    if (memfd < 0 || bell < 0) {
      if (memfd >= 0) sys::close(memfd);
      if (bell >= 0) sys::close(bell);
      *why = "the connector's hello carried no segment";
      (void)handshake.reject(*why, &ignored);
      return -EPROTO;
    }
    peer_bell_ = bell;
    internal_fds::add(peer_bell_);
    // Any ring size up to the protocol's bound: the connector chose it; this end's own
    // cap only bounds how far it grows the ring it writes (RingProducer).
    if (Status st = segment_.attach(memfd, Limits{kMinWindow, kMaxWindowLimit}); !st.ok()) {
      *why = st.reason;
      (void)handshake.reject(st.reason, &ignored);
      return -st.err;
    }
    // Mapped and sealed: the memfd is needed only to continue over exec.
    keep_memfd_for(fd);
    own_bell_ = internal_fds::take(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (own_bell_ < 0) {
      *why = "cannot create an eventfd";
      (void)handshake.reject(*why, &ignored);
      return -errno;
    }
    if (hello.slot_op == SlotOp::fresh) {
      // The pool keeps the segment and both eventfds from here, also when it refuses.
      PoolSlot* slot = pool->keep_fresh(hello.slot, static_cast<Segment&&>(segment_), own_bell_,
                                        peer_bell_, why);
      own_bell_ = peer_bell_ = -1;
      if (!slot) {
        (void)handshake.reject(*why, &ignored);
        return -EBUSY;
      }
      use_slot(pool, slot);
    }
  }
  slot_op_ = hello.slot_op;
  if (hello.pid == current_pid()) seg_->set_peer_in_this_process(true);
  map_sides(1);
  notifier_ = Notifier(*seg_, 1, own_bell_, peer_bell_);
  // A fresh or unpooled segment's reply carries this end's eventfd. A reuse gets no reply:
  // the connector has the eventfd already, and the confirmation below is the answer.
  const int rc = slot_op_ == SlotOp::reuse ? handshake.accept_in_segment(why)
                                           : handshake.accept(&own_bell_, 1, why);
  if (rc < 0) return rc;
  notifier_.note_my_cpu();  // before the confirmation the connector may wait on
  // Confirmation: a reply is queued before this store, so a connector that sees the
  // switch offset finds it waiting. Nothing was sent on TCP yet (offset 0), except in a
  // late attach.
  tx_control_.set_switch_offset(tcp_sent_);
  tx_switched_ = true;
  phase_ = Phase::active;
  (void)notifier_.data_published();  // a connector asleep in recv re-checks
  return 0;
}

void Conn::break_connection(const char* why) {
  snprintf(reason_, sizeof reason_, "%s", why);
  fallback_reason_ = reason_;
  phase_ = Phase::broken;
}

void Conn::fall_back(const char* why) {
  snprintf(reason_, sizeof reason_, "%s", why);
  fallback_reason_ = reason_;
  phase_ = Phase::tcp;
}

bool Conn::check_peer() {
  std::lock_guard lock(peer_lock_);
  if (phase_ != Phase::awaiting_peer) return false;
  uint64_t offset;
  const bool confirmed = rx_control_.switch_offset(offset);
  if (confirmed && slot_op_ == SlotOp::reuse) {
    // A reused slot's whole answer (Handshake::accept_in_segment): both eventfds are the
    // slot's already, and so is the segment's same-process mark (one acceptor per channel).
    dialer_.answered_in_segment();
    notifier_.set_peer(peer_bell_);
    slot_confirmed_ = true;
    phase_ = Phase::active;
    return true;
  }
  Reply reply;
  PassedFds fds;
  const char* why = "the acceptor's answer was malformed";
  switch (dialer_.poll_reply(reply, fds, &why)) {
    case ReplyStatus::pending:
      return false;
    case ReplyStatus::accepted: {
      // A fresh segment's eventfd comes with this reply. A reuse is never accepted by a
      // reply (its answer is the confirmation, above).
      if (slot_op_ == SlotOp::reuse) break;
      const int bell = fds.take(0);
      if (bell < 0 && confirmed) {
        // The acceptor's eventfd did not come through (this process is out of
        // descriptors: the kernel truncated it away) but the acceptor already sends on the
        // ring. Reading the ring needs no eventfd of the peer's; this end just cannot wake
        // the acceptor, so its own bytes go by TCP (send() moves them) and an acceptor
        // waiting for room is freed by its stalled-ring rule. (A pooled slot without it
        // is not kept: it is never confirmed.)
        peer_bell_missing_ = true;
        phase_ = Phase::active;
        LOG_DEBUG("shm: the acceptor's eventfd was not received (%s): this end sends on TCP",
                  strerrordesc_np(EMFILE));
        return true;
      }
      if (bell < 0) break;
      peer_bell_ = bell;
      if (slot_) slot_->peer_bell = bell;  // the slot's from now on
      internal_fds::add(peer_bell_);
      if (reply.pid == current_pid()) seg_->set_peer_in_this_process(true);
      notifier_.set_peer(peer_bell_);
      slot_confirmed_ = true;
      phase_ = Phase::active;
      return true;
    }
    case ReplyStatus::rejected:
      why = reply.reason;
      break;
    case ReplyStatus::gone:
      why = "the acceptor closed the handshake unanswered";
      break;
    case ReplyStatus::invalid:
      break;
  }
  if (confirmed) {
    // The acceptor already moved its sending to the ring but its answer is unusable:
    // the connection cannot be carried either way.
    break_connection("the acceptor confirmed but its answer was unusable");
    return true;
  }
  fall_back(why);
  return true;
}

// The acceptor's bytes came on TCP before its confirmation: it did not take the link (it
// confirms before its application can send anything), so its answer is queued, or its
// channel closed, or it kept the hello unmatched. Settled now rather than at the next look
// in 64, so that the connection says tcp, and why, as soon as it is.
void Conn::acceptor_sent_on_tcp() {
  if (check_peer() || phase_ != Phase::awaiting_peer) return;
  uint64_t offset;
  if (rx_control_.switch_offset(offset)) return;  // (its answer is being read elsewhere)
  std::lock_guard lock(peer_lock_);
  if (phase_ != Phase::awaiting_peer) return;
  // Another process accepted the connection (a listener shared after fork): the one
  // holding the hello drops it, and the channel serves this process's next connection.
  hello_withdrawn_ = dialer_.withdraw();
  // A late attach is offered at this end's next send (a connection that sends again is
  // worth moving; one that only reads its answer and closes pays nothing). Marked before
  // the phase changes: that lets another thread's readiness check settle the connection
  // (Conn::settled), after which its calls would no longer count its bytes.
  late_offer_due_ = hello_withdrawn_;
  // (Short: Conn::reason_ holds 111 characters.)
  fall_back("the acceptor sent on TCP without answering: its process had no hello "
            "(a listener shared after fork?)");
}

// Late attach ------------------------------------------------------------------------
// (shm_rendezvous_late.hpp; docs/shm-rendezvous.md, "Late attach")

namespace {

// Calls of the connector that look for the acceptor's dial before its offer is withdrawn.
// The acceptor dials at the receive after the one that read the connector's next request
// (late_step), before its next answer: the connector's receive of that answer finds it. A
// peer that never dials (a server whose late attach failed) costs this many accept4 calls.
constexpr int kLateLooks = 32;

}  // namespace

void Conn::cancel_late() {
  late_dial_ = late_offer_due_ = false;
  late_offer_.close();
}

void Conn::start_late_acceptor(const stats::Endpoint& peer, const stats::Endpoint& local,
                               uid_t record_uid, const char* why) {
  late_dial_ = true;
  late_uid_ = record_uid;
  side_ = 1;
  fall_back(why);
  // No segment yet: both directions on TCP (nothing looks at the segment then).
  tx_tcp_ = rx_tcp_ = true;
  late_peer_ = peer;
  late_local_ = local;
}

void Conn::late_step(int fd, bool receiving) {
  std::unique_lock other(receiving ? send_lock_ : recv_lock_, std::try_to_lock);
  if (!other.owns_lock() || phase_ != Phase::tcp) return;  // the next call looks
  if (write_shut_ || read_shut_) {
    // A stream already half-closed on TCP stays there: its end is the kernel's to tell.
    cancel_late();
    return;
  }
  if (late_dial_ && receiving && tcp_sent_ > 0) {
    // The connector offers at its first send after it saw this end's bytes on TCP before
    // any answer (acceptor_sent_on_tcp): bytes received after this end's first send and
    // receive were sent after the offer, so the dial comes with the receive after those.
    // (Dialling at once, right after the first answer, finds no offer yet.)
    if (late_mark_ == UINT64_MAX)
      late_mark_ = tcp_received_;
    else if (tcp_received_ > late_mark_)
      late_dial(fd);
  }
  if (late_offer_due_ && !receiving) {
    late_offer_due_ = false;
    open_late_offer(fd);
  }
  if (late_offer_.is_open()) late_accept(fd);
}

// The acceptor, with both locks: a channel to the connector's offer, a new segment of its
// own in the hello, and from here on the connector's part of the handshake (awaiting_peer:
// this end sends on TCP until the answer, whose switch offset says how many of the
// connector's bytes still come on TCP).
void Conn::late_dial(int fd) {
  late_dial_ = false;
  const char* why = "";
  const int channel = shm::late_dial(late_peer_, late_local_, late_uid_, &why);
  if (channel < 0) {
    LOG_DEBUG("fd=%d shm: no late attach: %s (%s)", fd, why, strerrordesc_np(-channel));
    return;
  }
  dialer_.adopt_late(channel, late_local_.port);
  const uint64_t cookie = socket_cookie(fd);
  if (make_segment(&why) < 0) {
    dialer_.close();
    LOG_DEBUG("fd=%d shm: no late attach: %s", fd, why);
    return;
  }
  // The accepting socket goes along: the connector's proof that this is its peer.
  const int fds[kLateHelloFds] = {seg_->fd(), own_bell_, fd};
  if (cookie == 0 || dialer_.send_hello(cookie, fds, kLateHelloFds, &why) < 0) {
    drop_segment();
    dialer_.close();
    LOG_DEBUG("fd=%d shm: no late attach: %s", fd, cookie ? why : "no socket cookie");
    return;
  }
  LOG_DEBUG("fd=%d shm: late attach: hello sent to the connector's offer after %llu bytes "
            "sent and %llu received on TCP", fd, (unsigned long long)tcp_sent_,
            (unsigned long long)tcp_received_);
  late_ = true;
  tx_tcp_ = rx_tcp_ = false;
  keep_memfd_for(fd);
  map_sides(0);
  notifier_ = Notifier(*seg_, 0, own_bell_, -1);
  tx_switched_ = false;
  phase_ = Phase::awaiting_peer;
  late_change_.store(true, std::memory_order_relaxed);
}

void Conn::open_late_offer(int fd) {
  const char* why = "";
  if (late_offer_.open(fd, &why) < 0) {
    LOG_DEBUG("fd=%d shm: no late-attach offer: %s", fd, why);
    return;
  }
  late_looks_left_ = kLateLooks;
}

// The connector, with both locks: the acceptor's hello, answered as an acceptor answers
// (start_acceptor), with this end's TCP bytes as its switch offset. The withdrawn hello's
// segment goes back first.
void Conn::late_accept(int fd) {
  if (--late_looks_left_ < 0) {
    late_offer_.close();
    LOG_DEBUG("fd=%d shm: late-attach offer withdrawn: the acceptor did not dial", fd);
    return;
  }
  Handshake handshake;
  const char* why = "";
  if (!late_offer_.take(handshake, &why)) {
    if (*why) LOG_DEBUG("fd=%d shm: late attach refused: %s", fd, why);
    return;
  }
  release_segment();
  slot_confirmed_ = hello_withdrawn_ = false;
  tx_switched_ = false;
  late_ = true;
  char before[sizeof reason_];
  memcpy(before, reason_, sizeof before);
  if (start_acceptor(handshake, &why, fd) < 0) {
    LOG_DEBUG("fd=%d shm: late attach failed: %s", fd, why);
    tx_tcp_ = rx_tcp_ = true;  // (the segment may be gone)
    fall_back(before);
    return;
  }
  LOG_DEBUG("fd=%d shm: late attach: on shm after %llu bytes sent and %llu received on TCP",
            fd, (unsigned long long)tcp_sent_, (unsigned long long)tcp_received_);
  late_change_.store(true, std::memory_order_relaxed);
}

void Conn::check_peer_cheap() {
  if (phase_ != Phase::awaiting_peer) return;
  uint64_t offset;
  // The confirmation is one load; the socket is asked only now and then (a rejection or an
  // acceptor that died comes only that way), and in every wait.
  if (rx_control_.switch_offset(offset) || (++calls_since_check_ & 63) == 0) (void)check_peer();
}

uint64_t Conn::tcp_bytes_due() {
  if (phase_ != Phase::active) return kUnknown;
  // The peer's stream continues on TCP after the ring (it moved its direction): no TCP
  // byte comes before ring bytes any more, and tcp_received_ counts the later ones too.
  if (rx_tcp_) return 0;
  uint64_t offset;
  if (!rx_control_.switch_offset(offset)) return kUnknown;
  if (offset < tcp_received_) {  // the peer claims fewer TCP bytes than it sent
    break_connection("the peer's switch offset is below the bytes it sent on TCP");
    return 0;
  }
  return offset - tcp_received_;
}

ssize_t Conn::tcp_peek(int fd) {
  char byte;
  const ssize_t n = real().recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 ? -errno : n;
}

short Conn::tcp_watch(bool for_data) {
  // The TCP socket wakes a waiter for the bytes a peer sends there (before its switch, after
  // a downgrade) and for the peer's death (end of stream or reset). Once the peer has
  // half-closed in order (FIN on the ring), the socket stays readable for good: a waiter
  // for room only must not watch it then, or it would never sleep.
  if (!for_data && rx_.fin() && !rx_tcp_) return 0;
  return POLLIN | POLLRDHUP;
}

bool Conn::ready_for(WaitFor what) {
  switch (what) {
    case WaitFor::data: return handoff_in_.readable(rx_) > 0 || rx_.fin() || rx_.corrupt();
    case WaitFor::space: return tx_.writable() > 0 || tx_.read_closed() || tx_.corrupt();
    case WaitFor::handoff: return handoff_out_.done() || tx_.read_closed();
  }
  return true;
}

FASTSOCK_CANCELLATION_POINT
int Conn::wait(std::unique_lock<std::mutex>& lock, int fd, WaitFor what, bool has_deadline,
               int64_t deadline) {
  // Spin first: a peer that answers within the budget costs no system call and no sleep.
  // A peer waiting on this CPU cannot answer while we spin: yield the CPU to it instead
  // (the same-CPU ping-pong took the whole 50 us budget per message when spinning).
  // A connector awaiting the acceptor spins for its confirmation likewise.
  const bool awaiting = phase_ == Phase::awaiting_peer;
  uint64_t offset;
  // Lives until the wait ends: the history needs its length. Only waits for data learn: a
  // writer waiting for room (or for its handoff to be taken) has a reader at work.
  SpinBudget spin(options_.spin_us, nullptr,
                  what == WaitFor::data ? link_io::thread_spin_history() : nullptr);
  if ((phase_ == Phase::active && tcp_bytes_due() == 0) || awaiting) {
    const bool yield = notifier_.peer_on_my_cpu();
    while (spin.more()) {
      if (awaiting ? rx_control_.switch_offset(offset) : ready_for(what)) return 0;
      if (yield)
        sched_yield();
      else
        __builtin_ia32_pause();
    }
  }
  if (what == WaitFor::data)
    notifier_.arm_for_data();
  else
    notifier_.arm_for_space();  // the consumer signals space as it takes handoff bytes too
  // Armed: from here a publish by the peer signals the eventfd, so this re-check cannot
  // miss one (shm_notify.hpp). The acceptor's confirmation is such a publish (it signals
  // after its store), and for a reused slot nothing else announces it: no reply comes.
  if (phase_ == Phase::awaiting_peer && rx_control_.switch_offset(offset)) return 0;
  if (phase_ == Phase::active && tcp_bytes_due() == 0 && ready_for(what)) return 0;
  pollfd p[3];
  nfds_t n = 0;
  p[n++] = pollfd{own_bell_, POLLIN, 0};
  // The TCP socket: bytes sent before the switch, and the peer's death (FIN or reset).
  if (const short tcp = tcp_watch(what == WaitFor::data); tcp) p[n++] = pollfd{fd, tcp, 0};
  int reply_at = -1;
  if (phase_ == Phase::awaiting_peer && dialer_.fd() >= 0) {
    reply_at = int(n);
    p[n++] = pollfd{dialer_.fd(), POLLIN, 0};
  }
  int timeout_ms = -1;
  if (has_deadline) {
    const int64_t left = deadline - now_ns();
    if (left <= 0) return -EAGAIN;
    timeout_ms = int(std::min<int64_t>((left + 999'999) / 1'000'000, INT_MAX));
  }
  // Not holding the lock while asleep: another thread may downgrade the connection (fork,
  // exec, fdopen) or use the other direction meanwhile.
  lock.unlock();
  std::atomic<int>& sleepers = sleepers_[kind_of(what)];
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  const int rc = real().poll(p, n, timeout_ms);
  const int err = errno;
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
  lock.lock();
  // The bell is read only when poll saw it ring: one system call fewer for every other
  // wake-up (a ring after poll returned leaves it readable, and the next wait drains it).
  if ((p[0].revents & POLLIN) && notifier_.drain() != 0) pass_on_signal(kind_of(what));
  // The acceptor's reply came: read it now. Its confirmation may not be visible yet (on one
  // CPU the reply wakes us before the acceptor's next store), and the socket stays readable
  // until read: left to check_peer_cheap, every wait until then would return at once.
  if (rc > 0 && reply_at >= 0 && p[reply_at].revents != 0) (void)check_peer();
  if (rc < 0) return -err;
  if (rc == 0 && has_deadline && now_ns() >= deadline) return -EAGAIN;
  return 0;
}

ssize_t Conn::recv(int fd, const iovec* iov, int iovcnt, int flags) {
  std::unique_lock lock(recv_lock_);
  const bool peek = flags & MSG_PEEK;
  const bool waitall = (flags & MSG_WAITALL) && !peek;
  const size_t total = iov_total(iov, iovcnt);
  if (total == 0) return 0;
  iovec part[kIovChunk];
  size_t got = 0;
  bool has_deadline = false, deadline_known = false, waited = false;
  int64_t deadline = 0;
  if (phase_ == Phase::tcp && (late_dial_ || late_offer_.is_open())) late_step(fd, true);
  for (;;) {
    check_peer_cheap();
    note_peer_downgrade();
    serve_resend_if_asked(fd);
    const int parts = iov_window(iov, iovcnt, got, total - got, part);
    if (phase_ == Phase::tcp || rx_tcp_) {
      const ssize_t n = recv_tcp(fd, part, parts, flags);
      if (n < 0) return got ? ssize_t(got) : n;
      return ssize_t(got) + n;
    }
    if (phase_ == Phase::broken) return got ? ssize_t(got) : -ECONNRESET;
    const uint64_t due = tcp_bytes_due();
    if (due > 0) {
      // Bytes the peer sent on TCP before its switch (or while it has not switched).
      iovec tcp_part[kIovChunk];
      const int tp = iov_window(part, parts, 0, std::min<uint64_t>(due, total - got), tcp_part);
      const ssize_t n = kernel_recv(fd, tcp_part, tp, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
      if (n > 0) {
        if (!peek) tcp_received_ += uint64_t(n);
        // (In a late attach the connector's bytes on TCP come before its answer.)
        if (phase_ == Phase::awaiting_peer && !late_) acceptor_sent_on_tcp();
        got += size_t(n);
        if (!waitall || got == total) return ssize_t(got);
        continue;
      }
      if (n == 0) {
        // TCP end of stream. A peer that switched published its offset before its FIN
        // (and queued its reply before that): look again before concluding that the stream
        // ended on TCP. A connector still awaiting the acceptor collects its reply first:
        // the offset alone leaves the phase at awaiting_peer, and the ring may hold the
        // acceptor's bytes and FIN (seen under strace: a 1-byte reply lost to a false EOF).
        if (due == kUnknown) {
          if (phase_ == Phase::awaiting_peer && check_peer()) continue;
          if (tcp_bytes_due() != kUnknown) continue;
        }
        return ssize_t(got);
      }
      if (n != -EAGAIN) return got ? ssize_t(got) : n;
    } else if (read_shut_ && handoff_in_.readable(rx_) == 0) {
      return ssize_t(got);  // shutdown(SHUT_RD): end of stream once nothing is waiting
    } else {
      if (expect_type_ != 0 && typed_mismatch(total - got))
        return got ? ssize_t(got) : -EBADMSG;  // the bytes stay for an untyped read
      const size_t n = handoff_in_.read(rx_, part, parts, total - got, peek);
      if (n > 0) {
        if (!peek) (void)notifier_.space_freed();
        got += n;
        if (!waitall || got == total) return ssize_t(got);
        continue;
      }
      if (rx_.corrupt()) {
        break_connection("the receive ring is corrupt");
        return got ? ssize_t(got) : -ECONNRESET;
      }
      if (rx_.eof()) return ssize_t(got);
      if (note_peer_downgrade()) continue;  // the rest of the stream comes on TCP
      // Empty, no FIN: a peer that died has no FIN on the ring, but the kernel closed its
      // TCP socket, which we see as end of stream or a reset. Asking the kernel is a system
      // call per empty look, as much as the rest of a small message's round trip, so it is
      // asked when something may have come there: after a wait of this call (whose poll
      // watches the socket), when a readiness check saw the socket readable (tcp_news_),
      // and at every kTcpLookEvery-th empty look otherwise (a program that only retries
      // non-blocking receives).
      const bool look_at_tcp = waited ||
                               (tcp_news_.load(std::memory_order_relaxed) &&
                                tcp_news_.exchange(false, std::memory_order_relaxed)) ||
                               ++empty_looks_ % kTcpLookEvery == 0;
      const ssize_t t = look_at_tcp ? tcp_peek(fd) : -EAGAIN;
      if (t == 0) {
        // The peer may have put its last bytes and its FIN on the ring, then closed, after
        // the ring was looked at above: look again before concluding that it died.
        if (rx_.readable() > 0 || rx_.eof()) continue;
        return ssize_t(got);
      }
      if (t > 0) {  // TCP bytes after the switch: not our protocol
        break_connection("TCP bytes arrived after the peer's switch");
        return got ? ssize_t(got) : -ECONNRESET;
      }
      if (t != -EAGAIN) return got ? ssize_t(got) : t;
    }
    if (nonblocking(fd, flags, mode_)) return got ? ssize_t(got) : -EAGAIN;
    if (!deadline_known) {
      has_deadline = socket_deadline(fd, SO_RCVTIMEO, deadline, mode_);
      deadline_known = true;
    }
    if (int w = wait(lock, fd, WaitFor::data, has_deadline, deadline); w < 0) {
      if (got) return ssize_t(got);
      if (w == -EINTR && interrupted_call_restarts()) continue;
      return w;
    }
    waited = true;
  }
}

int Conn::typed(bool begin, bool sending, uint8_t type, uint64_t bytes) {
  if (sending) {
    std::lock_guard lock(send_lock_);
    // The bytes go to the ring or by handoff exactly when send() finds the same state.
    if (begin && phase_ == Phase::active && !tx_tcp_ && !resending_ && bytes > 0)
      tx_control_.mark_typed(shm_sent_, shm_sent_ + bytes, type);
    return 0;
  }
  std::lock_guard lock(recv_lock_);
  expect_type_ = 0;
  // Checked only where the receive's bytes are all shm stream bytes from here on.
  if (begin && phase_ == Phase::active && !rx_tcp_ && tcp_bytes_due() == 0) {
    expect_type_ = type;
    expect_end_ = rx_.consumed() + bytes;
  }
  return 0;
}

bool Conn::typed_mismatch(size_t want) {
  const uint64_t at = rx_.consumed();
  if (at >= expect_end_) return false;
  const size_t ready = handoff_in_.readable(rx_);
  const uint64_t until = at + std::min<uint64_t>({uint64_t(want), uint64_t(ready), expect_end_ - at});
  return until > at && rx_control_.typed_conflict(at, until, expect_type_);
}

ssize_t Conn::recv_tcp(int fd, const iovec* iov, int iovcnt, int flags) {
  const bool peek = flags & MSG_PEEK;
  const size_t total = iov_total(iov, iovcnt);
  size_t got = 0;
  iovec part[kIovChunk];
  while (leftover_pos_ < leftover_len_ && got < total) {
    if (tcp_received_ < leftover_after_tcp_) {
      // The peer's TCP bytes from before its switch come first.
      const int n = iov_window(iov, iovcnt, got,
                               size_t(std::min<uint64_t>(leftover_after_tcp_ - tcp_received_,
                                                         total - got)), part);
      const ssize_t r = kernel_recv(fd, part, n, (flags & ~MSG_WAITALL) | (got ? MSG_DONTWAIT : 0));
      if (r <= 0) return got ? ssize_t(got) : r;
      if (peek) return ssize_t(got) + r;
      tcp_received_ += uint64_t(r);
      got += size_t(r);
      continue;
    }
    const int n = iov_window(iov, iovcnt, got,
                             std::min(leftover_len_ - leftover_pos_, total - got), part);
    size_t copied = 0;
    for (int i = 0; i < n; ++i) {
      std::memcpy(part[i].iov_base, leftover_ + leftover_pos_ + copied, part[i].iov_len);
      copied += part[i].iov_len;
    }
    got += copied;
    if (peek) return ssize_t(got);
    leftover_pos_ += copied;
    if (!(flags & MSG_WAITALL)) return ssize_t(got);
  }
  if (got == total) return ssize_t(got);
  // The kernel's stream (after the leftover, if any). With bytes already copied, take
  // what is there without waiting, unless MSG_WAITALL asks for the rest.
  const int n = iov_window(iov, iovcnt, got, total - got, part);
  const int kflags = got && !(flags & MSG_WAITALL) ? flags | MSG_DONTWAIT : flags;
  const ssize_t r = kernel_recv(fd, part, n, kflags);
  if (r < 0) return got ? ssize_t(got) : r;
  if (!peek) tcp_received_ += uint64_t(r);
  return ssize_t(got) + r;
}

ssize_t Conn::send(int fd, const iovec* iov, int iovcnt, int flags) {
  std::unique_lock lock(send_lock_);
  if (phase_ == Phase::tcp && (late_offer_due_ || late_offer_.is_open())) late_step(fd, false);
  check_peer_cheap();
  if (int rc = serve_resend(fd, flags); rc < 0) return rc;
  if (peer_bell_missing_ && phase_ == Phase::active && !tx_tcp_) move_tx_to_tcp(fd);
  if (phase_ == Phase::tcp || phase_ == Phase::awaiting_peer || tx_tcp_) {
    // Not switched (yet): the kernel carries this end's bytes, and counts them.
    const ssize_t n = kernel_send(fd, iov, iovcnt, flags | MSG_NOSIGNAL);
    if (n > 0) tcp_sent_ += uint64_t(n);
    return n;
  }
  if (phase_ == Phase::broken) return -ECONNRESET;
  if (write_shut_ || tx_.read_closed()) return -EPIPE;
  if (!tx_switched_) {
    tx_control_.set_switch_offset(tcp_sent_);
    tx_switched_ = true;
  }
  const size_t total = iov_total(iov, iovcnt);
  size_t sent = 0;
  bool has_deadline = false, deadline_known = false, nb_known = false, nb = false;
  bool handoff_ok = true;
  int64_t deadline = 0;
  int64_t stalled_since = 0;  // when the ring was found full with no room made since
  int index = 0;
  size_t offset = 0;  // into iov[index]
  while (sent < total) {
    while (index < iovcnt && offset == iov[index].iov_len) {
      ++index;
      offset = 0;
    }
    // While this thread slept, the connection may have moved to TCP (a downgrade by either
    // end): the rest of the message follows there, after any bytes being resent.
    if (int rc = serve_resend(fd, flags); rc < 0) return sent ? ssize_t(sent) : rc;
    if (phase_ == Phase::broken) return sent ? ssize_t(sent) : -ECONNRESET;
    if (phase_ == Phase::tcp || tx_tcp_) {
      iovec rest[kIovChunk];
      const int parts = iov_window(iov + index, iovcnt - index, offset,
                                   total - sent, rest);
      const ssize_t k = kernel_send(fd, rest, parts, flags | MSG_NOSIGNAL);
      if (k < 0) return sent ? ssize_t(sent) : k;
      tcp_sent_ += uint64_t(k);
      return ssize_t(sent) + k;
    }
    const char* base = static_cast<const char*>(iov[index].iov_base) + offset;
    const size_t rest_of_element = iov[index].iov_len - offset;
    // A large element of a blocking send goes by handoff: the peer copies it straight from
    // this buffer, and this call returns once it has (shm_handoff.hpp).
    if (handoff_ok && rest_of_element >= options_.handoff_threshold && !handoff_out_.refused()) {
      if (!nb_known) {
        nb = nonblocking(fd, flags, mode_);
        nb_known = true;
      }
      if (!nb && handoff_out_.post(tx_, base, rest_of_element)) {
        (void)notifier_.data_published();
        int w = 0;
        // TCP would have buffered the message; a handoff waits for the reader. A reader
        // that does not come (it is sending too, or busy) gets the bytes through the ring
        // instead once the patience runs out: two peers that both send large messages
        // before reading must not deadlock on each other.
        // The patience restarts whenever the reader takes bytes: a reader copying a large
        // message a chunk at a time is never cut off, one that stopped is.
        int64_t patience_end = now_ns() + kHandoffPatienceNs;
        uint64_t progress_seen = 0;
        while (!handoff_out_.done() && phase_ == Phase::active &&
               tx_control_.state() != DirectionState::downgrade_requested) {
          if (!deadline_known) {
            has_deadline = socket_deadline(fd, SO_SNDTIMEO, deadline, mode_);
            deadline_known = true;
          }
          const bool own_bound = !has_deadline || patience_end < deadline;
          if ((w = wait(lock, fd, WaitFor::handoff, true,
                        own_bound ? patience_end : deadline)) < 0) {
            if (w == -EINTR && interrupted_call_restarts()) continue;
            if (w == -EAGAIN && own_bound) {
              w = 0;
              if (const uint64_t p = handoff_out_.progress(); p > progress_seen) {
                progress_seen = p;
                patience_end = now_ns() + kHandoffPatienceNs;
                continue;
              }
              handoff_ok = false;  // patience over: the ring takes the rest of this call
            }
            break;
          }
          if (dead_peer(fd)) break;
        }
        const size_t taken = handoff_out_.finish();
        if (handoff_out_.corrupt()) break_connection("the handoff slot is corrupt");
        shm_sent_ += taken;
        sent += taken;
        offset += taken;
        if (taken < rest_of_element && (w < 0 || phase_ == Phase::broken || dead_peer(fd))) {
          if (sent) return ssize_t(sent);
          return w < 0 ? w : -EPIPE;
        }
        continue;  // the rest (if any) goes through the ring
      }
    }
    iovec part[kIovChunk];
    const int parts = iov_window(iov + index, iovcnt - index, offset,
                                 total - sent, part);
    const size_t n = tx_.write(part, parts, total - sent);
    if (n > 0) {
      stalled_since = 0;
      (void)notifier_.data_published();
      shm_sent_ += n;
      sent += n;
      size_t advance = n;
      while (advance > 0) {
        const size_t step = std::min(advance, iov[index].iov_len - offset);
        offset += step;
        advance -= step;
        if (offset == iov[index].iov_len && advance > 0) {
          ++index;
          offset = 0;
        }
      }
      continue;
    }
    if (tx_.corrupt()) {
      break_connection("the send ring is corrupt");
      return sent ? ssize_t(sent) : -ECONNRESET;
    }
    if (tx_.read_closed() || dead_peer(fd)) return sent ? ssize_t(sent) : -EPIPE;
    if (!nb_known) {
      nb = nonblocking(fd, flags, mode_);
      nb_known = true;
    }
    if (nb) {
      // As the kernel marks a socket that ran out of room (SOCK_NOSPACE): the reader's
      // next take signals this end, whose edge-triggered EPOLLOUT waits for just that.
      // Then look again (shm_notify.hpp's protocol): a reader that emptied the ring between
      // the write above and the arm saw no arm and signalled nothing, and an EAGAIN now
      // would leave an edge-triggered writer waiting for good (nginx sending a 64 MiB file
      // to curl stalled so, once in 20 to 100 downloads, everything sent also received).
      notifier_.arm_for_space();
      if (tx_.writable() > 0) continue;
      return sent ? ssize_t(sent) : -EAGAIN;
    }
    if (!deadline_known) {
      has_deadline = socket_deadline(fd, SO_SNDTIMEO, deadline, mode_);
      deadline_known = true;
    }
    // TCP would have taken these bytes into its socket buffer (megabytes) and returned; a
    // program may count on that, e.g. one that writes a whole request before it reads the
    // answer while its peer does the same, or socat's echo through its own pipe. A reader
    // that takes nothing from the full ring for kStalledRingNs is not coming soon: this
    // direction continues on TCP, whose buffer takes what it would have taken.
    const int64_t now = now_ns();
    if (stalled_since == 0) stalled_since = now;
    const int64_t stall_end = stalled_since + kStalledRingNs;
    if (now >= stall_end) {
      LOG_DEBUG("fd=%d: the reader took nothing from the full ring for 250 ms: this "
                "direction continues on TCP", fd);
      move_tx_to_tcp(fd);
      if (rx_tcp_) fall_back("the reader took nothing from the full ring for 250 ms");
      continue;  // the rest goes on TCP
    }
    const bool own_bound = !has_deadline || stall_end < deadline;
    if (int w = wait(lock, fd, WaitFor::space, true, own_bound ? stall_end : deadline); w < 0) {
      if (w == -EAGAIN && own_bound) continue;  // the stall check above decides
      if (sent) return ssize_t(sent);
      if (w == -EINTR && interrupted_call_restarts()) continue;
      return w;
    }
  }
  return ssize_t(sent);
}

void Conn::downgrade(int fd, const char* why) {
  std::lock_guard send_lock(send_lock_);
  std::lock_guard recv_lock(recv_lock_);
  // (fork: parent and child would both attach late, each with its own idea of the stream.)
  cancel_late();
  // A connector that has not looked at the acceptor's answer yet collects it now: the
  // acceptor's eventfd is needed to wake it for the resend.
  if (phase_ == Phase::awaiting_peer) (void)check_peer();
  if (phase_ != Phase::active && phase_ != Phase::awaiting_peer) return;
  // This end's stream: its last ring byte is written (the send lock is held). Normally the
  // peer empties the ring, then reads TCP. If the peer already left the ring itself, it
  // asked for the bytes it did not read: resend them now, before anything new.
  move_tx_to_tcp(fd);
  // The peer's stream: this end reads no more of the ring, and asks the peer to resend
  // what it did not consume. If the peer already left the ring, the ring holds the last of
  // its bytes before TCP: keep them for the next reads.
  if (rx_control_.request_downgrade() == DirectionState::tcp_resumed) keep_ring_leftover();
  rx_tcp_ = true;
  (void)notifier_.data_published();
  (void)notifier_.space_freed();
  snprintf(reason_, sizeof reason_, "moved to TCP: %s", why);
  fallback_reason_ = reason_;
  phase_ = Phase::tcp;
}

void Conn::move_tx_to_tcp(int fd) {
  end_room_wait();
  if (!tx_switched_) {
    tx_control_.set_switch_offset(tcp_sent_);
    tx_switched_ = true;
  }
  if (tx_control_.resume_on_tcp() == DirectionState::downgrade_requested) {
    while (!tx_tcp_ && serve_resend(fd, 0) == -EINTR) {}
  }
  tx_tcp_ = true;
}

void Conn::keep_ring_leftover() {
  const size_t n = handoff_in_.readable(rx_);
  if (n == 0) return;
  leftover_ = static_cast<char*>(std::malloc(n));
  if (!leftover_) {
    break_connection("out of memory for the bytes left in the ring");
    return;
  }
  iovec v{leftover_, n};
  leftover_len_ = handoff_in_.read(rx_, &v, 1, n, false);
  leftover_pos_ = 0;
  // They follow the TCP bytes the peer sent before its switch.
  uint64_t offset = 0;
  leftover_after_tcp_ = rx_control_.switch_offset(offset) ? offset : tcp_received_;
}

bool Conn::note_peer_downgrade() {
  if (phase_ != Phase::active || rx_tcp_) return false;
  if (rx_control_.state() != DirectionState::tcp_resumed) return false;
  // The peer's state store follows its last ring byte: once the ring (and any handoff) is
  // empty after seeing it, nothing more comes that way.
  if (tcp_bytes_due() != 0 || handoff_in_.readable(rx_) != 0) return false;
  rx_tcp_ = true;
  if (tx_tcp_) fall_back("the peer moved the connection to TCP");
  return true;
}

FASTSOCK_CANCELLATION_POINT
int Conn::serve_resend(int fd, int flags) {
  if (tx_tcp_ || (phase_ != Phase::active && phase_ != Phase::tcp)) return 0;
  if (!resending_) {
    if (tx_control_.state() != DirectionState::downgrade_requested) return 0;
    uint64_t consumed;
    if (!tx_control_.peer_consumed(shm_sent_, consumed) || shm_sent_ - consumed > tx_.window()) {
      break_connection("the peer's consumed count is inconsistent");
      return -ECONNRESET;
    }
    // What the peer did not take is still in the ring, right before the tail.
    resend_next_ = tx_.written() - (shm_sent_ - consumed);
    resending_ = true;
  }
  while (resend_next_ < tx_.written()) {
    size_t len = 0;
    const unsigned char* bytes = tx_.bytes_at(resend_next_, SIZE_MAX, len);
    if (len == 0) {
      break_connection("the bytes to resend are no longer in the ring");
      return -ECONNRESET;
    }
    const iovec v{const_cast<unsigned char*>(bytes), len};
    const ssize_t n = kernel_send(fd, &v, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == -EAGAIN) {
      if (nonblocking(fd, flags, mode_)) return -EAGAIN;
      pollfd p{fd, POLLOUT, 0};
      if (real().poll(&p, 1, -1) < 0 && errno == EINTR) return -EINTR;  // room comes: the peer reads TCP now
      continue;
    }
    if (n < 0) return n;
    resend_next_ += uint64_t(n);
    tcp_sent_ += uint64_t(n);
  }
  resending_ = false;
  tx_tcp_ = true;
  if (rx_tcp_ && phase_ == Phase::active) fall_back("the peer moved the connection to TCP");
  return 0;
}

bool Conn::dead_peer(int fd) {
  // A peer whose process is gone had its TCP socket closed by the kernel: we see a reset,
  // or an end of stream that its library did not announce with a FIN on the ring first (an
  // orderly half-close does, see shutdown()).
  const ssize_t t = tcp_peek(fd);
  if (t < 0) return t != -EAGAIN;
  return t == 0 && !rx_.fin();
}

long Conn::bytes_readable(int fd) {
  check_peer_cheap();
  (void)note_peer_downgrade();
  if (phase_ == Phase::tcp || rx_tcp_ || tcp_bytes_due() > 0) {
    int n = 0;
    return real().ioctl(fd, FIONREAD, &n) == 0 ? n : -errno;
  }
  if (phase_ == Phase::broken) return -ECONNRESET;
  return long(std::min<size_t>(handoff_in_.readable(rx_), INT_MAX));
}

void Conn::serve_resend_if_asked(int fd) {
  if (phase_ != Phase::active || tx_tcp_) return;
  if (!resending_ && tx_control_.state() != DirectionState::downgrade_requested) return;
  // The peer that asked is waiting for these bytes, and this end may be in any call on the
  // connection (or in poll): make progress without blocking, unless a send is under way in
  // another thread (it serves the request itself). wait_fds watches the socket for room.
  if (!send_lock_.try_lock()) return;
  (void)serve_resend(fd, MSG_DONTWAIT);
  send_lock_.unlock();
}

bool Conn::poll_awaiting(int fd, short events, short& rev) {
  uint64_t offset;
  if (rx_control_.switch_offset(offset)) return false;
  const short tcp_events = short(events & (POLLIN | POLLRDHUP | POLLOUT));
  pollfd p[2] = {pollfd{fd, tcp_events, 0}, pollfd{dialer_.fd(), POLLIN, 0}};
  const nfds_t n = dialer_.fd() >= 0 ? 2 : 1;
  if (real().poll(p, n, 0) < 0 || (n == 2 && p[1].revents != 0)) return false;
  if (p[0].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
    tcp_news_.store(true, std::memory_order_relaxed);  // the next empty recv looks
  rev = short(p[0].revents & (events | POLLERR | POLLHUP));
  return true;
}

short Conn::poll_now(int fd, short events) {
  // While the acceptor's reply is awaited its socket is among this connection's wait fds
  // (wait_fds): read it whenever it has something, or a reply that came before the
  // confirmation would keep poll and epoll returning at once. It was read on every look:
  // wrk against a pre-forked nginx (a connection per request, half of them never
  // answered) made about six recvmsg and ten poll calls per request.
  if (phase_ == Phase::awaiting_peer) {
    if (short rev = 0; poll_awaiting(fd, events, rev)) return rev;
    (void)check_peer();
  }
  (void)note_peer_downgrade();
  serve_resend_if_asked(fd);
  if (phase_ == Phase::tcp) {
    pollfd p{fd, events, 0};
    return real().poll(&p, 1, 0) > 0 ? p.revents : 0;
  }
  if (phase_ == Phase::broken) return short(POLLERR | POLLHUP | (events & (POLLIN | POLLOUT)));
  short rev = 0;
  if (events & (POLLIN | POLLRDHUP)) {
    const bool ring_turn = !rx_tcp_ && tcp_bytes_due() == 0;
    const bool fin = ring_turn && rx_.fin();
    if (ring_turn && (fin || handoff_in_.readable(rx_) > 0 || rx_.corrupt())) {
      rev |= POLLIN;
      if (fin) rev |= POLLRDHUP;
    } else {
      // TCP: bytes before the switch or after a downgrade, or the end of a dead peer.
      pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
      if (real().poll(&p, 1, 0) > 0) {
        rev |= short(p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR));
        tcp_news_.store(true, std::memory_order_relaxed);  // the next empty recv looks
      }
    }
  }
  if (events & POLLOUT) {
    const bool on_tcp = phase_ == Phase::awaiting_peer || tx_tcp_;
    // Writable once half the window is free: a program that writes what it read in
    // buffers of half a window (socat: 8 KiB, the default 16 KiB window) then does not
    // block after poll said writable (TCP's far larger buffer hides the difference).
    bool room = ring_room_now();
    if (!room && !on_tcp && !resending_) {
      // No room: ask the reader to signal when it takes bytes (the kernel's SOCK_NOSPACE),
      // then look again, so that a take between the two looks is not missed.
      notifier_.arm_for_space();
      room = ring_room_now();
    }
    if (room && !resending_) {
      end_room_wait();
      rev |= POLLOUT;
    } else if (on_tcp || (!room && !resending_ && reader_stalled(fd))) {
      // The kernel's buffer takes this direction's bytes (after a stall, from now on).
      pollfd p{fd, POLLOUT, 0};
      if (real().poll(&p, 1, 0) > 0) rev |= short(p.revents & (POLLOUT | POLLERR | POLLHUP));
    } else if (!resending_ && dead_peer(fd)) {
      rev |= POLLOUT | POLLERR;  // as the kernel reports a reset socket: a write fails now
    }
  }
  return short(rev & (events | POLLERR | POLLHUP));
}

bool Conn::ring_room_now() {
  const bool on_ring = phase_ == Phase::active && !tx_tcp_;
  return on_ring && (write_shut_ || tx_.read_closed() || tx_.half_free());
}

bool Conn::reader_stalled(int fd) {
  std::unique_lock lock(send_lock_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // a send is under way: it applies the rule itself
  // A blocking send asleep in a handoff (the lock released) owns the stream's next bytes.
  if (phase_ != Phase::active || tx_tcp_ || handoff_out_.outstanding()) return false;
  (void)tx_.writable();  // validates the consumer's head
  if (tx_.corrupt()) return false;  // the next send reports it
  const uint64_t head = tx_.head_seen();
  const int64_t now = now_ns();
  const int64_t since = room_wait_since_.load(std::memory_order_relaxed);
  if (since == 0 || head != room_wait_head_) {
    // The clock (re)starts: the first look, or the reader took bytes since the last.
    if (room_wait_since_.exchange(now) == 0)
      Transport::timed_waits.fetch_add(1, std::memory_order_relaxed);
    room_wait_head_ = head;
    return false;
  }
  if (now < since + kStalledRingNs) return false;
  LOG_DEBUG("fd=%d: the reader took nothing from the ring for 250 ms while this end waited "
            "for room in poll/epoll: this direction continues on TCP", fd);
  move_tx_to_tcp(fd);
  if (rx_tcp_) fall_back("the reader took nothing from the full ring for 250 ms");
  return true;
}

void Conn::end_room_wait() {
  if (room_wait_since_.load(std::memory_order_relaxed) != 0 && room_wait_since_.exchange(0) != 0)
    Transport::timed_waits.fetch_sub(1, std::memory_order_relaxed);
}

int64_t Conn::recheck_at(short events) const {
  const int64_t since = room_wait_since_.load(std::memory_order_relaxed);
  if (!(events & POLLOUT) || since == 0 || phase_ != Phase::active || tx_tcp_) return 0;
  return since + kStalledRingNs;
}

int Conn::wait_fds(int fd, short events, pollfd* out) {
  int n = 0;
  if (phase_ == Phase::tcp || phase_ == Phase::broken) {
    out[n++] = pollfd{fd, events, 0};
    return n;
  }
  if (events & (POLLIN | POLLRDHUP)) notifier_.arm_for_data();
  // Room is asked for only while there is none (poll_now arms it then too). Only this
  // end's sends take room away, and a send that runs out arms it itself: a registration
  // for EPOLLOUT that found room does not make the reader signal every request it takes.
  if ((events & POLLOUT) && !ring_room_now()) notifier_.arm_for_space();
  out[n++] = pollfd{own_bell_, POLLIN, 0};
  short tcp_events = tcp_watch(events & (POLLIN | POLLRDHUP));
  if (phase_ == Phase::awaiting_peer || tx_tcp_) tcp_events |= short(events & POLLOUT);
  if (resending_) tcp_events |= POLLOUT;
  if (tcp_events) out[n++] = pollfd{fd, tcp_events, 0};
  if (phase_ == Phase::awaiting_peer && dialer_.fd() >= 0) out[n++] = pollfd{dialer_.fd(), POLLIN, 0};
  return n;
}

void Conn::after_wait(bool edge_watched) {
  if (phase_ != Phase::active && phase_ != Phase::awaiting_peer) return;
  if ((edge_watched ? notifier_.drain_if_signalled() : notifier_.drain()) != 0) pass_on_signal(-1);
}

void Conn::pass_on_signal(int waiter_kind) {
  // Shared values only: the other kind's ring end belongs to another thread. A waiter that
  // wakes for nothing re-arms and sleeps, so a pass-on never loops between two waiters
  // unless one of them has what it waits for.
  for (int k = 0; k < 2; ++k) {
    if (k == waiter_kind || sleepers_[k].load(std::memory_order_seq_cst) == 0) continue;
    const bool ready = k == 0 ? rx_.data_hint() || handoff_in_.posted_hint() : tx_.room_hint();
    if (!ready) continue;
    const uint64_t one = 1;
    (void)sys::write(own_bell_, &one, sizeof one);
    sched_yield();  // let the woken one run (it may share this CPU)
    return;
  }
}

int Conn::shutdown(int fd, int how) {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return -EINVAL;
  if (how == SHUT_WR || how == SHUT_RDWR) {
    // The ring's FIN (and the switch offset) go before the kernel's: a peer that sees
    // the TCP FIN then finds where the stream continued, never a false end of stream.
    std::lock_guard lock(send_lock_);
    if ((phase_ == Phase::active || phase_ == Phase::awaiting_peer) && !write_shut_) {
      if (!tx_switched_) {
        tx_control_.set_switch_offset(tcp_sent_);
        tx_switched_ = true;
      }
      tx_.close_write();
      (void)notifier_.data_published();
    }
  }
  // The kernel's state stays authoritative (ENOTCONN), and a peer that never switched sees
  // the TCP half-close.
  if (real().shutdown(fd, how) != 0) return -errno;
  if (how == SHUT_WR || how == SHUT_RDWR) write_shut_ = true;
  if (how == SHUT_RD || how == SHUT_RDWR) read_shut_ = true;
  return 0;
}

void Conn::close() {
  // (A connector still awaiting the acceptor does the same: the acceptor may attach later
  // and must find the stream's end, not take the TCP FIN for a dead peer.)
  if (phase_ == Phase::active || phase_ == Phase::awaiting_peer) {
    // SO_LINGER {1, 0}: the kernel resets the connection, and the peer must see that reset
    // (ECONNRESET), not an orderly end: no FIN on the ring then.
    if (!abortive_close_) {
      // FIN after every byte already in the ring (the peer still reads them: the segment
      // lives while it is mapped).
      if (!tx_switched_) {
        tx_control_.set_switch_offset(tcp_sent_);
        tx_switched_ = true;
      }
      tx_.close_write();
    }
    rx_.close_read();  // nothing more will be read from the peer
    (void)notifier_.data_published();
    (void)notifier_.space_freed();
  }
  dialer_.close();
  cancel_late();
}

}  // namespace fastsock::shm
