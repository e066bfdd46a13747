#include "verbs_conn.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include "cancel_point.hpp"
#include "guard.hpp"
#include "internal_fds.hpp"
#include "iov_cursor.hpp"
#include "link_io.hpp"
#include "log.hpp"
#include "real.hpp"
#include "signal_restart.hpp"
#include "transport.hpp"

namespace fastsock::verbs {

namespace {

// Receive slots beyond the advertised credits: control messages (switch, fin, credit,
// downgrade) need no credit and land here.
constexpr uint32_t kReserveSlots = 8;
// Data messages up to this size are sent inline (copied into the work request). perftest's
// ib_send_lat shows no difference either way on Soft-RoCE up to 384 B (bench/verbs-inline.sh);
// on hardware inlining small messages saves the device a DMA read. docs/verbs.md, "Inline sends".
constexpr uint32_t kMaxInline = 64;
// Control messages carry at most 8 bytes, always inline.
constexpr uint32_t kControlInline = 8;
// Send slots start this small: a connection that sends only small messages (or nothing)
// registers 16 KiB for them, not 256 KiB. The first larger send that finds every message
// acknowledged moves to full-size slots (grow_send_slots).
constexpr uint32_t kFirstSendSlotBytes = 1024;
// How long a closing end waits for its last messages to reach the peer before the TCP FIN
// (which must not overtake them) goes out.
constexpr int64_t kCloseWaitNs = 1'000'000'000;

// A sender that waits for credits while its peer consumes nothing for this long gives the
// link up (room_wait_expired). TCP would have taken the bytes into its socket buffer
// (megabytes) and returned, and a program may count on that: two ends that each write a
// whole message before reading the other's deadlock on 16 credits. Longer than the shm
// ring's 250 ms: the whole connection leaves the link, for good, so a peer that is only
// slow (a loaded host, an emulated device) should not trigger it.
constexpr int64_t kStalledLinkNs = 1'000'000'000;

// A connection still connecting after this long stays on TCP (a peer without fastsock never
// connects; its acceptor must stop paying for the link).
constexpr int64_t kConnectingNs = 5'000'000'000;

// Work request ids: the kind in the high half, the slot in the low half. The switch message
// has its own kind: its completion tells that the peer's queue has it (see start_resync);
// so has the read of the peer's leave word (leave_order).
constexpr uint64_t kWrRecv = 0, kWrData = 1ull << 32, kWrControl = 2ull << 32,
                   kWrSwitch = 3ull << 32, kWrLeaveRead = 4ull << 32;

// How long a downgrade waits for the peer's leave word to settle, or for the downgrade
// message of a peer that left first; the peer is in its own downgrade then, so only a peer
// stopped or killed in the middle of it takes this long (the connection is reset).
constexpr int64_t kLeaveWaitNs = 1'000'000'000;
constexpr size_t kLeaveBytes = 32;  // Conn::leave_

// Test hooks (docs/configuration.md): sleeps for the milliseconds `var` names, if set.
void hold_for_test(const char* var) noexcept {
  const char* value = getenv(var);
  if (!value) return;
  const long ms = strtol(value, nullptr, 10);
  if (ms > 0 && ms <= 10'000) {
    const timespec t{ms / 1000, (ms % 1000) * 1'000'000};
    nanosleep(&t, nullptr);
  }
}

using link_io::Deadline;
using link_io::iov_total;
using link_io::kernel_recv;
using link_io::kernel_send;
using link_io::nonblocking;
using link_io::now_ns;
using link_io::SpinBudget;

// The part of `iov` after its first `skip` bytes, at most `max` bytes of it.
int part_of(const iovec* iov, int n, size_t skip, size_t max, iovec* out, int out_max) noexcept {
  IovCursor cursor(iov, n);
  cursor.advance(skip);
  size_t covered;
  return cursor.slice(max, out, out_max, &covered);
}

uint64_t random_nonce() noexcept {
  uint64_t v = 0;
  if (getentropy(&v, sizeof v) != 0) v = uint64_t(now_ns()) ^ uint64_t(getpid());
  return v;
}

}  // namespace

Conn::Conn(Cm& cm, const ConnOptions& options) noexcept
    : cm_(cm), lib_(cm.lib()), options_(options), owner_pid_(getpid()) {}

Conn::~Conn() {
  end_room_wait();
  destroy_resources();
  delete[] stage_len_;
  delete[] zc_;
  delete[] rx_fifo_;
}

void Conn::destroy_resources() noexcept {
  // A forked child shares the parent's device context: destroying through it would tear
  // down the parent's queue pair. The child only forgets.
  const bool mine = getpid() == owner_pid_;
  rdma_cm_id* id = nullptr;
  {
    std::lock_guard lock(cm_.lock());
    cm_.forget(this, id_);
    id = id_;
    id_ = nullptr;
    if (mine) {
      release_queued();  // their pool slots go back before the pool may go
      free_device_resources();
    }
  }
  if (mine && id) {
    ReentryGuard guard;
    lib_.rdma_destroy_id(id);
  }
  forget_device_resources();
  release_queued();  // a forked child: frees its copies, never touches the parent's pool
  free(buffers_);
  buffers_ = nullptr;
  free(leave_);
  leave_ = nullptr;
  if (wake_fd_ >= 0) internal_fds::close(wake_fd_);
  wake_fd_ = -1;
}

int Conn::start_connector(const TcpKey& key, const char** why) noexcept {
  key_ = key;
  nonce_ = random_nonce();
  wake_fd_ = internal_fds::take(real().epoll_create1(EPOLL_CLOEXEC));
  if (wake_fd_ < 0) {
    *why = "no descriptor for the wake-up set";
    return -errno;
  }
  std::lock_guard lock(cm_.lock());
  return cm_.connect(this, key.local, key.peer, &id_, why);
}

int Conn::start_acceptor(const TcpKey& key, const char** why) noexcept {
  key_ = key;
  acceptor_ = true;
  wake_fd_ = internal_fds::take(real().epoll_create1(EPOLL_CLOEXEC));
  if (wake_fd_ < 0) {
    *why = "no descriptor for the wake-up set";
    return -errno;
  }
  std::lock_guard lock(cm_.lock());
  cm_.add_acceptor(this, key);
  return 0;
}

void Conn::free_device_resources() noexcept {
  ReentryGuard guard;
  drain_channel();  // a completion queue with unacknowledged events cannot be destroyed
  if (qp_) lib_.ibv_destroy_qp(qp_);
  qp_ = nullptr;
  reclaim_completions();
  if (cq_) lib_.ibv_destroy_cq(cq_);
  if (mr_) lib_.ibv_dereg_mr(mr_);
  if (leave_mr_) lib_.ibv_dereg_mr(leave_mr_);
  if (channel_) {
    internal_fds::remove(channel_->fd);  // leaves wake_fd_'s set as it closes
    lib_.ibv_destroy_comp_channel(channel_);
  }
  // The protection domain is the pool's; the last user of a removed device frees both.
  if (context_) cm_.release_context(context_, this);
  forget_device_resources();
}

void Conn::forget_device_resources() noexcept {
  qp_ = nullptr;
  cq_ = nullptr;
  mr_ = nullptr;
  leave_mr_ = nullptr;
  pd_ = nullptr;
  pool_ = nullptr;
  channel_ = nullptr;
  context_ = nullptr;
}

void Conn::reclaim_completions() noexcept {
  if (!cq_ || !pool_) return;
  ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(cq_, 16, wc)) > 0)
    for (int i = 0; i < n; ++i)
      if ((wc[i].wr_id >> 32) == (kWrRecv >> 32) && pool_->valid(uint32_t(wc[i].wr_id))) {
        pool_->taken();
        (void)pool_->repost(uint32_t(wc[i].wr_id));
      }
}

void Conn::release(RxEntry& e) noexcept {
  if (e.slot < 0)
    free(e.data);
  else if (pool_ && pool_->repost(uint32_t(e.slot)) != 0)
    fail("cannot repost a receive buffer");
  e = RxEntry{nullptr, 0, -1};
}

void Conn::release_queued() noexcept {
  if (!rx_fifo_) return;
  for (; rx_head_ != rx_tail_; ++rx_head_) release(rx_fifo_[rx_head_ % recv_slots_]);
  rx_offset_ = 0;
}

bool Conn::copy_out_held() noexcept {
  for (uint32_t i = rx_head_; i != rx_tail_; ++i) {
    RxEntry& e = rx_fifo_[i % recv_slots_];
    if (e.slot < 0) continue;
    auto* copy = static_cast<uint8_t*>(malloc(e.len));
    if (!copy) return false;
    const uint32_t len = e.len;
    memcpy(copy, e.data, len);
    release(e);
    e = RxEntry{copy, len, -1};
  }
  return true;
}

void Conn::on_pool_low(bool copy_out) noexcept {
  std::lock_guard lock(progress_lock_);
  progress_locked();
  if (copy_out && !copy_out_held())
    LOG_WARN("fd=%d verbs: out of memory: received messages stay in the receive pool", log_fd_);
}

rdma_cm_id* Conn::on_device_removal() noexcept {
  std::lock_guard lock(progress_lock_);
  progress_locked();  // what the link delivered before it went is kept
  if (!copy_out_held()) {  // the pool goes with the device
    LOG_WARN("fd=%d verbs: out of memory: received bytes are lost with the device", log_fd_);
    release_queued();
  }
  fail("the RDMA device was removed");
  link_error_ = true;
  if (getpid() != owner_pid_) return nullptr;
  free_device_resources();
  rdma_cm_id* id = id_;
  id_ = nullptr;
  return id;
}

int Conn::create_qp(rdma_cm_id* id, const char** why) noexcept {
  ReentryGuard guard;
  ibv_context* context = cm_.own_context(id->verbs, this, options_.slot_bytes, &pool_);
  if (!context) {
    *why = id->verbs ? "cannot open the RDMA device" : "no RDMA device for this address";
    return -ENODEV;
  }
  context_ = context;
  pd_ = pool_->pd();
  recv_slots_ = options_.slots + kReserveSlots;
  send_slot_bytes_ = std::min(kFirstSendSlotBytes, options_.slot_bytes);
  const size_t bytes = size_t(options_.slots) * send_slot_bytes_;
  if (posix_memalign(reinterpret_cast<void**>(&buffers_), 4096, bytes) != 0) buffers_ = nullptr;
  stage_len_ = new (std::nothrow) uint32_t[options_.slots]();
  zc_ = new (std::nothrow) ZeroCopySlot[options_.slots]();
  rx_fifo_ = new (std::nothrow) RxEntry[recv_slots_]();
  if (posix_memalign(reinterpret_cast<void**>(&leave_), 64, kLeaveBytes) != 0) leave_ = nullptr;
  if (!buffers_ || !stage_len_ || !zc_ || !rx_fifo_ || !leave_) {
    *why = "out of memory";
    return -ENOMEM;
  }
  channel_ = lib_.ibv_create_comp_channel(context);
  if (!channel_) {
    *why = "cannot allocate a completion channel";
    return -ENOMEM;
  }
  // Moved like the library's own (libibverbs reads and closes channel_->fd, and no completion
  // queue refers to it yet).
  channel_->fd = internal_fds::take(channel_->fd);
  const int fl = real().fcntl(channel_->fd, F_GETFL);
  (void)real().fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK);
  // Every completion that can be outstanding fits (a full completion queue is a fatal
  // error): the peer's data messages (its credits) and control messages (a few: switch,
  // FIN, downgrade, and at most two credit messages per window of ours), and our sends.
  const int cqe = int(recv_slots_ + options_.slots + 2 * kReserveSlots + 8);
  cq_ = lib_.ibv_create_cq(context, cqe, nullptr, channel_, 0);
  mr_ = cq_ ? (lib_.ibv_reg_mr)(pd_, buffers_, bytes, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  // The leave word has a registration of its own: the peer may read it, and nothing else
  // of ours (the send slots are registered for local access only).
  memset(leave_, 0, kLeaveBytes);
  leave_mr_ = mr_ ? (lib_.ibv_reg_mr)(pd_, leave_, kLeaveBytes,
                                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
                  : nullptr;
  if (!mr_ || !leave_mr_) {
    *why = "cannot create the completion queue or register buffers";
    return -ENOMEM;
  }
  ibv_qp_init_attr attr{};
  attr.send_cq = cq_;
  attr.recv_cq = cq_;
  attr.srq = pool_->srq();
  attr.qp_type = IBV_QPT_RC;
  // Data messages are bounded by credits; control messages (credits, switch, FIN) are
  // not, and their completions wait for the peer's acknowledgements: room for twice the
  // reserve. A full queue defers a control message (sq_full), it never fails the link.
  max_send_wr_ = options_.slots + 2 * kReserveSlots;
  attr.cap.max_send_wr = max_send_wr_;
  attr.cap.max_send_sge = 1;
  attr.cap.max_inline_data = kMaxInline;
  qp_ = lib_.ibv_create_qp(pd_, &attr);
  if (!qp_) {
    // A device that inlines less: control messages still need their payload inline (they
    // are sent from the caller's stack), data messages then go from their slots.
    attr.cap.max_inline_data = kControlInline;
    qp_ = lib_.ibv_create_qp(pd_, &attr);
  }
  if (!qp_) {
    *why = "cannot create the queue pair";
    return -errno;
  }
  // What the device granted (it may round up): data messages up to that go inline.
  inline_max_ = std::min<uint32_t>(attr.cap.max_inline_data, kMaxInline);
  if (const int rc = move_qp(id, IBV_QPS_INIT); rc != 0) {
    *why = "cannot initialise the queue pair";
    return rc;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (real().epoll_ctl(wake_fd_, EPOLL_CTL_ADD, channel_->fd, &ev) != 0) {
    *why = "cannot watch the completion channel";
    return -errno;
  }
  (void)ibv_req_notify_cq(cq_, 0);
  return 0;
}

int Conn::move_qp(rdma_cm_id* id, ibv_qp_state state) noexcept {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  int rc = lib_.rdma_init_qp_attr(id, &attr, &mask) != 0 ? -errno : 0;
  if (rc == 0 && state == IBV_QPS_INIT) {
    // The peer reads our leave word (leave_order), whatever the connection manager grants.
    attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (rc == 0) rc = -std::abs(lib_.ibv_modify_qp(qp_, &attr, mask));
  if (rc != 0)
    LOG_DEBUG("fd=%d verbs: moving the queue pair to state %d failed: %s", log_fd_, int(state),
              strerror(-rc));
  return rc;
}

static rdma_conn_param make_param(const void* data, uint8_t len) {
  rdma_conn_param p{};
  p.private_data = data;
  p.private_data_len = len;
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  // A receiver that has not reposted a slot yet makes the sender retry, never fail.
  p.rnr_retry_count = 7;
  return p;
}

int Conn::on_route(rdma_cm_id* id, const char** why) noexcept {
  std::lock_guard lock(progress_lock_);
  if (state() != State::connecting) {  // moved to TCP meanwhile (fork, exec, ...)
    *why = "the connection moved to TCP";
    return -ECANCELED;
  }
  if (!qp_) {
    if (int rc = create_qp(id, why); rc != 0) return rc;
  } else if (!id->verbs || !context_ || id->verbs->device != context_->device) {
    // After a redirect the queue pair made for the first attempt (still in INIT) is used
    // again: the new port is on the same address, so on the same device.
    *why = "the redirect leads to another RDMA device";
    return -EXDEV;
  }
  ConnectData data{};
  data.magic = htons(kWireMagic);
  data.version = kWireVersion;
  // The 4-tuple as the acceptor will see it: its local end is our peer.
  data.family = uint8_t(key_.peer.family);
  data.client_port = htons(key_.local.port);
  data.server_port = htons(key_.peer.port);
  memcpy(data.client_addr, key_.local.addr, 16);
  memcpy(data.server_addr, key_.peer.addr, 16);
  data.nonce = nonce_;
  rdma_conn_param param = make_param(&data, sizeof data);
  param.qp_num = qp_->qp_num;
  if (lib_.rdma_connect(id, &param) != 0) {
    *why = "rdma_connect failed";
    return -errno;
  }
  return 0;
}

void Conn::on_connect_started(rdma_cm_id* id) noexcept {
  std::lock_guard lock(progress_lock_);
  id_ = id;
}

int Conn::on_request(rdma_cm_id* id, const ConnectData& data, const char** why) noexcept {
  std::lock_guard lock(progress_lock_);
  // The id is ours from here, also when we refuse it (the Cm rejects it then): we destroy
  // it with our resources. The Cm cannot while it handles the request's event (destroying
  // an id waits for its events to be acknowledged).
  id_ = id;
  if (state() != State::connecting) {  // moved to TCP before the request came: refused
    *why = "the connection moved to TCP";
    return -ECANCELED;
  }
  if (int rc = create_qp(id, why); rc != 0) return rc;
  AcceptData reply{};
  reply.magic = htons(kWireMagic);
  reply.version = kWireVersion;
  reply.nonce = data.nonce;
  // Ready before the answer, as librdmacm does for queue pairs it manages: the connector
  // may send as soon as it has it.
  if (move_qp(id, IBV_QPS_RTR) != 0 || move_qp(id, IBV_QPS_RTS) != 0) {
    *why = "cannot make the queue pair ready";
    return -EIO;
  }
  rdma_conn_param param = make_param(&reply, sizeof reply);
  param.qp_num = qp_->qp_num;
  if (lib_.rdma_accept(id, &param) != 0) {
    *why = "rdma_accept failed";
    return -errno;
  }
  return 0;
}

void Conn::on_connect_response(const void* private_data, uint8_t len) noexcept {
  AcceptData reply{};
  if (!private_data || len < sizeof reply) return on_failed("the RDMA peer sent no reply");
  memcpy(&reply, private_data, sizeof reply);
  if (ntohs(reply.magic) != kWireMagic || reply.nonce != nonce_)
    return on_failed("the RDMA peer answered for another connection");
  std::lock_guard lock(progress_lock_);
  if (!id_ || move_qp(id_, IBV_QPS_RTR) != 0 || move_qp(id_, IBV_QPS_RTS) != 0) {
    fail("cannot make the queue pair ready");
    return;
  }
  if (lib_.rdma_establish(id_) != 0) {
    fail("rdma_establish failed");
    return;
  }
  established_locked();
}

int Conn::on_redirect(uint16_t port, const char** why) noexcept {
  std::lock_guard lock(progress_lock_);
  if (state() != State::connecting) {
    *why = "the connection moved to TCP";
    return -ECANCELED;
  }
  if (redirected_) {  // a second one would be a loop
    *why = "the RDMA listener redirected the connection twice";
    return -ELOOP;
  }
  redirected_ = true;
  stats::Endpoint dst = key_.peer;
  dst.port = port;
  rdma_cm_id* id = nullptr;
  if (const int rc = cm_.connect(this, key_.local, dst, &id, why); rc != 0) return rc;
  LOG_DEBUG("fd=%d verbs: redirected to RDMA port %u (a forked child of the listener accepted "
            "the connection)", log_fd_, unsigned(port));
  id_ = id;  // the service destroys the old one
  return 0;
}

void Conn::on_established() noexcept {
  std::lock_guard lock(progress_lock_);
  established_locked();
}

void Conn::report_in(uint8_t* transport, uint8_t carried_id, char* reason) noexcept {
  std::lock_guard lock(progress_lock_);
  report_transport_ = transport;
  report_carried_id_ = carried_id;
  report_reason_ = reason;
  if (state() == State::established) report_carried_locked();
}

void Conn::report_carried_locked() noexcept {
  if (!report_transport_) return;  // before report_in: it reports then
  *report_transport_ = report_carried_id_;
  report_reason_[skipped_reasons_len_] = '\0';
  LOG_DEBUG("fd=%d carried by verbs", log_fd_);
}

void Conn::established_locked() noexcept {
  State expected = State::connecting;
  if (state_.compare_exchange_strong(expected, State::established, std::memory_order_acq_rel)) {
    LOG_DEBUG("fd=%d verbs: RDMA connection established", log_fd_);
    announce_leave_word();
    report_carried_locked();
  } else if (downgrade_unsent_ && !link_error_ && qp_)
    post_downgrade();  // we moved to TCP while connecting: the peer must not switch
  // Wake a waiter that only watched TCP so far: the link may carry the peer's bytes now.
  if (channel_) (void)ibv_req_notify_cq(cq_, 0);
}

void Conn::on_failed(const char* why) noexcept {
  std::lock_guard lock(progress_lock_);
  fail(why);
}

void Conn::on_disconnected() noexcept {
  std::lock_guard lock(progress_lock_);
  // The peer's last messages (its FIN after a close) were delivered before its disconnect:
  // take them first. Whatever of our stream it did not acknowledge goes on TCP.
  progress_locked();
  fail("the RDMA peer disconnected");
}

// Progress lock held. rc: ibv_post_send's result (an errno value) or -EAGAIN.
void Conn::post_failed(const char* what, int rc) noexcept {
  LOG_DEBUG("fd=%d verbs: posting %s failed: %s", log_fd_, what, strerror(std::abs(rc)));
  fail("cannot post on the queue pair");
}

// Progress lock held (or the connection not shared yet).
void Conn::fail(const char* why) noexcept {
  if (!link_error_) LOG_DEBUG("fd=%d verbs: the link fails: %s", log_fd_, why);
  link_error_ = true;
  end_room_wait();
  wake_waiters();
  const State s = state();
  if (s == State::tcp || s == State::broken) return;
  if (tx_switched_ && !tx_back_on_tcp_) {
    // Our stream is on the link. The peer reads a resync frame on TCP after our switch
    // offset only if it knows that offset: without the switch message's completion we
    // cannot tell, and raw bytes or a frame could both be wrong.
    if (!switch_confirmed_) return break_connection(why);
    start_resync();
  }
  // The peer's stream, if on the link, goes on on TCP after its resync frame (or ends).
  fallback_reason_ = why;
  state_.store(State::tcp, std::memory_order_release);
  if (s == State::established && id_ && getpid() == owner_pid_) {
    // Tells a peer that did not notice (its queue pair may look healthy): it resyncs too.
    ReentryGuard guard;
    (void)lib_.rdma_disconnect(id_);
  }
}

void Conn::break_connection(const char* why) noexcept {
  link_error_ = true;
  wake_waiters();
  if (state() == State::broken) return;
  fallback_reason_ = why;
  state_.store(State::broken, std::memory_order_release);
  LOG_DEBUG("fd=%d verbs: the connection is reset: %s", log_fd_, why);
}

void Conn::start_resync() noexcept {
  if (qp_) {  // nothing more leaves on the link, whatever state it is in
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)lib_.ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
  }
  ResyncFrame frame{};
  memcpy(frame.magic, kResyncMagic, sizeof frame.magic);
  frame.version = kWireVersion;
  put_u64(frame.resend_from, acked_bytes_);
  memcpy(resync_frame_, &frame, sizeof frame);
  resync_frame_left_ = sizeof frame;
  resend_from_ = acked_bytes_;
  resend_due_ = acked_bytes_ < link_sent_;
  tx_back_on_tcp_ = true;
  LOG_DEBUG("fd=%d verbs: the link failed: our stream resumes on TCP, %llu link bytes resent",
            log_fd_, static_cast<unsigned long long>(link_sent_ - acked_bytes_));
}

void Conn::grow_send_slots() noexcept {
  if (!mr_ || !pd_) return;  // the device was removed: sends go to TCP
  ReentryGuard guard;
  const size_t bytes = size_t(options_.slots) * options_.slot_bytes;
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, bytes) != 0) return;
  ibv_mr* mr = (lib_.ibv_reg_mr)(pd_, memory, bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    // Typically RLIMIT_MEMLOCK: the small slots carry large sends too, in more messages.
    LOG_DEBUG("fd=%d verbs: cannot register full-size send slots (%s): staying at %u bytes",
              log_fd_, strerror(errno), send_slot_bytes_);
    free(memory);
    send_grow_failed_ = true;
    return;
  }
  // Every message sent was acknowledged: nothing in the old slots is needed for a resend.
  (void)lib_.ibv_dereg_mr(mr_);
  free(buffers_);
  buffers_ = static_cast<uint8_t*>(memory);
  mr_ = mr;
  send_slot_bytes_ = options_.slot_bytes;
}

int Conn::post_recv(uint32_t slot) noexcept {
  if (!pool_) return ENODEV;  // the device was removed
  return pool_->repost(slot);
}

uint32_t Conn::take_credits() noexcept {
  const uint32_t c = std::min<uint32_t>(unreported_credits_, 0xFFFFFF);
  unreported_credits_ -= c;
  return c;
}

int Conn::post_control(Msg type, const uint8_t* payload, uint32_t len, uint32_t lkey) noexcept {
  if (!qp_) return ENODEV;  // the device was removed
  if (sq_full()) return -EAGAIN;
  ibv_sge sge{reinterpret_cast<uintptr_t>(payload), len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = type == Msg::switch_at ? kWrSwitch : kWrControl;
  wr.sg_list = len ? &sge : nullptr;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | (lkey == 0 ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(make_imm(type, take_credits()));
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &wr, &bad);
  if (rc == 0) {
    ++sends_in_flight_;
    ++sends_posted_;
  }
  return rc;
}

int Conn::post_data(uint32_t stage_slot, uint32_t len) noexcept {
  return post_data(stage_slot, len, buffers_ + size_t(stage_slot) * send_slot_bytes_, mr_->lkey);
}

int Conn::post_data(uint32_t stage_slot, uint32_t len, const uint8_t* src,
                    uint32_t lkey) noexcept {
  if (!qp_) return ENODEV;  // the device was removed
  if (sq_full()) return -EAGAIN;
  ibv_sge sge{reinterpret_cast<uintptr_t>(src), len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = kWrData | stage_slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | (len <= inline_max_ ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(make_imm(Msg::data, take_credits()));
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &wr, &bad);
  if (rc == 0) {
    ++sends_in_flight_;
    ++sends_posted_;
  }
  return rc;
}

bool Conn::zero_copy_source(IovCursor& in, uint32_t len, uint32_t slot) noexcept {
  iovec piece, rest;
  size_t covered = 0, rest_len = 0;
  if (in.slice(len, &piece, 1, &covered) != 1 || covered != len) return false;
  (void)in.slice(SIZE_MAX, &rest, 1, &rest_len);  // to the end of this piece of the array
  const auto* from = static_cast<const uint8_t*>(piece.iov_base);
  const auto at = reinterpret_cast<uintptr_t>(from);
  RegCache& cache = RegCache::get();
  RegCache::Ref ref = zc_last_ref_;  // the previous message's, if this one lies in it too
  if (!(ref.lo <= at && at + len <= ref.hi && cache.retain(ref)))
    ref = cache.acquire(lib_, pd_, from, len, from + rest_len);
  if (!ref.mr) return false;
  zc_last_ref_ = ref;
  in.advance(len);
  zc_[slot] = ZeroCopySlot{from, ref};
  if (!zc_pending_ && zc_bytes_ == 0)
    LOG_DEBUG("fd=%d verbs: zero-copy sends from the application's buffers", log_fd_);
  zc_pending_ = true;
  zc_bytes_ += len;
  return true;
}

const uint8_t* Conn::sent_bytes(uint32_t slot) const noexcept {
  if (zc_ && zc_[slot].src) return zc_[slot].src;
  return buffers_ + size_t(slot) * send_slot_bytes_;
}

bool Conn::zero_copy_sent() const noexcept {
  return sends_done_ >= zc_last_post_ || !qp_ || !cq_;
}

void Conn::settle_zero_copy(int fd, Deadline& deadline) noexcept {
  if (!zc_pending_) return;
  // The device may read the application's bytes until their send completes; a queue pair
  // in error flushes its sends at once. Bounded all the same: send() must return.
  const int64_t give_up = now_ns() + kCloseWaitNs;
  for (;;) {
    {
      std::lock_guard lock(progress_lock_);
      progress_locked();
      if (zero_copy_sent()) break;
    }
    if (now_ns() >= give_up) {
      std::lock_guard lock(progress_lock_);
      fail("zero-copy sends did not complete");
      break;
    }
    (void)wait(fd, WaitFor::sent, deadline, now_ns() + 10'000'000);
  }
  std::lock_guard lock(progress_lock_);
  for (uint64_t msg = stage_acked_; msg < stage_head_; ++msg) {
    const uint32_t slot = uint32_t(msg % options_.slots);
    if (!zc_[slot].src) continue;
    memcpy(buffers_ + size_t(slot) * send_slot_bytes_, zc_[slot].src, stage_len_[slot]);
    zc_copied_aside_ += stage_len_[slot];
  }
  for (uint32_t slot = 0; slot < options_.slots; ++slot) forget_zero_copy_slot(slot);
  zc_last_ref_ = RegCache::Ref{};
  zc_pending_ = false;
}

void Conn::forget_zero_copy_slot(uint32_t slot) noexcept {
  if (zc_[slot].ref.mr) RegCache::get().release(lib_, zc_[slot].ref);
  zc_[slot] = ZeroCopySlot{};
}

void Conn::copy_aside_after_fork() noexcept {
  if (!zc_ || !zc_pending_) return;
  for (uint32_t slot = 0; slot < options_.slots; ++slot) {
    if (zc_[slot].src) memcpy(buffers_ + size_t(slot) * send_slot_bytes_, zc_[slot].src, stage_len_[slot]);
    zc_[slot] = ZeroCopySlot{};
  }
  zc_last_ref_ = RegCache::Ref{};
  zc_pending_ = false;
}

uint32_t Conn::credits_available() const noexcept {
  return options_.slots - uint32_t(stage_head_ - stage_acked_);
}

void Conn::return_credits_if_due() noexcept {
  if (unreported_credits_ < options_.slots / 2 || link_error_ || !qp_) return;
  const int rc = post_control(Msg::credit, nullptr, 0);
  if (rc == 0 || rc == -EAGAIN) return;  // a full send queue: the credits go with a later message
  // After the peer's FIN its queue pair may be gone already, and it sends nothing more:
  // the credits do not matter then. Otherwise the link is unusable.
  if (peer_fin_)
    link_error_ = true;
  else
    post_failed("a credit", rc);
}

bool Conn::stale(int64_t opened_ns, int64_t now) noexcept {
  if (state() != State::connecting || now - opened_ns < kConnectingNs) return false;
  on_failed(acceptor_ ? "the peer did not connect over RDMA (not under fastsock?)"
                      : "the RDMA connection did not come up in time");
  return true;
}

void Conn::on_recv(uint32_t slot, uint32_t imm, uint32_t len) noexcept {
  const uint32_t credits = imm_credits(imm);
  // Credits return data messages in the order they were sent. Once our stream went back to
  // TCP, what it resends from is fixed: later credits change nothing.
  for (uint32_t i = 0; i < credits && stage_acked_ < stage_head_ && !tx_back_on_tcp_; ++i)
    acked_bytes_ += stage_len_[stage_acked_++ % options_.slots];
  uint8_t* payload = pool_->data(slot);
  switch (imm_type(imm)) {
    case Msg::data: {
      // After our downgrade or the peer's resync, TCP carries these bytes.
      if (len == 0 || rx_back_on_tcp_ || peer_resynced_) break;
      if (rx_tail_ - rx_head_ >= recv_slots_) {  // beyond the credits it was given
        fail("the RDMA peer broke the protocol");
        break;
      }
      RxEntry& e = rx_fifo_[rx_tail_ % recv_slots_];
      e = RxEntry{payload, len, int32_t(slot)};
      ++rx_tail_;
      link_received_ += len;
      // A pool that cannot give more slots keeps its posted ones for every connection.
      if (pool_->low()) (void)copy_out_held();
      return;  // reposted once consumed
    }
    case Msg::switch_at:
      if (len >= 8) {
        peer_switch_at_ = get_u64(payload);
        peer_switch_known_ = true;
      }
      break;
    case Msg::fin: peer_fin_ = true; break;
    case Msg::credit: break;
    case Msg::downgrade:
      peer_left_ = true;
      if (len >= 8 && tx_switched_) {
        resend_from_ = get_u64(payload);
        resend_due_ = true;
      }
      tx_back_on_tcp_ = true;
      break;
    case Msg::leave_word:
      if (len >= 12) {
        peer_leave_addr_ = get_u64(payload);
        peer_leave_rkey_ = get_u32(payload + 8);
        peer_leave_known_ = true;
      }
      break;
    default: fail("the RDMA peer sent an unknown message"); break;
  }
  if (post_recv(slot) != 0) fail("cannot repost a receive buffer");
}

void Conn::progress_locked() noexcept {
  if (!cq_) return;
  ibv_wc wc[16];
  for (;;) {
    const int n = ibv_poll_cq(cq_, 16, wc);
    if (n <= 0) {
      if (n < 0) fail("the completion queue failed");
      break;
    }
    for (int i = 0; i < n; ++i) {
      const bool recv = (wc[i].wr_id >> 32) == (kWrRecv >> 32);
      // A receive took a slot off the pool, whatever its status.
      if (recv && pool_ && pool_->valid(uint32_t(wc[i].wr_id))) pool_->taken();
      if (wc[i].status != IBV_WC_SUCCESS) {
        // An error completion's opcode is undefined: wr_id says whether it was a send.
        if (!recv) {
          --sends_in_flight_;
          ++sends_done_;
        }
        else if (pool_ && pool_->valid(uint32_t(wc[i].wr_id))) (void)post_recv(uint32_t(wc[i].wr_id));
        // A refused connect flushes the posted receives, often before the CM thread has
        // handled the REJECTED/UNREACHABLE event that says why: that event (or the
        // connecting time limit) ends the attempt with the real reason.
        if (wc[i].status == IBV_WC_WR_FLUSH_ERR && state() == State::connecting) continue;
        fail(wc[i].status == IBV_WC_WR_FLUSH_ERR ? "the queue pair was flushed"
                                                 : "an RDMA operation failed");
        continue;
      }
      if (wc[i].opcode & IBV_WC_RECV) {
        const uint32_t slot = uint32_t(wc[i].wr_id);
        if (!pool_ || !pool_->valid(slot)) {
          fail("a receive completion names no slot of the pool");
          continue;
        }
        if (!(wc[i].wc_flags & IBV_WC_WITH_IMM)) {
          (void)post_recv(slot);
          fail("the RDMA peer broke the protocol");
          continue;
        }
        on_recv(slot, ntohl(wc[i].imm_data), wc[i].byte_len);
      } else {
        --sends_in_flight_;
        ++sends_done_;
        if ((wc[i].wr_id >> 32) == (kWrSwitch >> 32)) switch_confirmed_ = true;
        if ((wc[i].wr_id >> 32) == (kWrLeaveRead >> 32)) leave_read_done_ = true;
      }
    }
  }
  return_credits_if_due();
}

void Conn::progress() noexcept {
  std::lock_guard lock(progress_lock_);
  progress_locked();
}

void Conn::drain_channel(unsigned most) noexcept {
  if (!channel_) return;
  ibv_cq* cq;
  void* ctx;
  unsigned events = 0;
  while (events < most && lib_.ibv_get_cq_event(channel_, &cq, &ctx) == 0) ++events;
  if (events) lib_.ibv_ack_cq_events(cq_, events);
}

bool Conn::rx_on_tcp() const noexcept {
  if (rx_back_on_tcp_) return true;
  if (!peer_switch_known_) return true;
  if (tcp_received_ < peer_switch_at_) return true;
  // The peer left the link (or its link failed): after its last link bytes, TCP again.
  return (peer_left_ || peer_resynced_) && rx_head_ == rx_tail_;
}

bool Conn::ready_for(WaitFor what, bool tcp_tx, bool failed) noexcept {
  std::lock_guard lock(progress_lock_);
  progress_locked();
  if (state() == State::broken || link_error_ != failed) return true;
  if (what == WaitFor::data) {
    if (rx_on_tcp()) return false;  // the TCP socket is watched for that
    return rx_head_ != rx_tail_ || peer_fin_ || peer_left_;
  }
  if (what == WaitFor::sent) return zero_copy_sent();
  const bool on_tcp = !tx_switched_ || tx_back_on_tcp_;
  return on_tcp != tcp_tx || (!on_tcp && can_post_data());
}

void Conn::wake_waiters() noexcept {
  if (wake_fd_ < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  (void)real().epoll_ctl(wake_fd_, EPOLL_CTL_ADD, cm_.always_ready_fd(), &ev);  // or EEXIST
}

FASTSOCK_CANCELLATION_POINT
int Conn::wait(int fd, WaitFor what, Deadline& deadline, int64_t until_ns) {
  bool tcp_tx, failed;  // what the caller saw; a change is news for it
  {
    std::lock_guard lock(progress_lock_);
    tcp_tx = !tx_switched_ || tx_back_on_tcp_;
    failed = link_error_;
  }
  // Lives until the wait ends: the history needs its length. Only waits for data learn: a
  // writer waiting for room (or for its handoff to be taken) has a reader at work.
  SpinBudget spin(options_.spin_us, nullptr,
                  what == WaitFor::data ? link_io::thread_spin_history() : nullptr);
  if (state() == State::established && !failed) {
    while (spin.more()) {
      if (ready_for(what, tcp_tx, failed)) return 0;
      __builtin_ia32_pause();
    }
  }
  {
    std::lock_guard lock(progress_lock_);
    if (cq_) (void)ibv_req_notify_cq(cq_, 0);
  }
  if (ready_for(what, tcp_tx, failed)) return 0;
  pollfd p[2];
  nfds_t n = 0;
  // A failed link wakes nobody any more; its wake-up set is then always readable.
  if (!failed) p[n++] = pollfd{wake_fd_, POLLIN, 0};
  short tcp = 0;  // a waiter for room does not watch TCP's end (see wait_fds)
  {
    std::lock_guard lock(progress_lock_);
    // Data: after the peer's switch offset TCP brings a resync frame or the end, so it is
    // watched whichever carries the stream now.
    if (what == WaitFor::data) tcp |= POLLIN | POLLRDHUP;
    if ((what == WaitFor::space && (!tx_switched_ || tx_back_on_tcp_)) || resend_due_)
      tcp |= POLLOUT;
  }
  p[n++] = pollfd{fd, tcp, 0};
  int timeout_ms = deadline.poll_ms(fd);
  if (timeout_ms == 0) return -EAGAIN;
  if (until_ns > 0) {  // woken by then (rounded up, so that the caller finds it passed)
    const int64_t left_ms = std::max<int64_t>(0, (until_ns - now_ns() + 999'999) / 1'000'000);
    if (timeout_ms < 0 || left_ms < timeout_ms) timeout_ms = int(std::min<int64_t>(left_ms, INT_MAX));
  }
  const int rc = real().poll(p, n, timeout_ms);
  const int err = errno;
  // We armed once, so the channel holds at most one event of ours: take it when the poll
  // saw the wake-up set readable (reading on until EAGAIN costs a system call per wait).
  if (rc > 0 && !failed && (p[0].revents & POLLIN)) {
    std::lock_guard lock(progress_lock_);  // the device's removal may free the channel
    drain_channel(1);
  }
  if (rc < 0) return -err;
  if (rc == 0 && deadline.passed(fd)) return -EAGAIN;
  return 0;
}

ssize_t Conn::recv_link(const iovec* iov, int iovcnt, bool peek) noexcept {
  const size_t want = iov_total(iov, iovcnt);
  size_t got = 0;
  IovCursor out(iov, iovcnt);
  uint32_t head = rx_head_, offset = rx_offset_;
  while (got < want && head != rx_tail_) {
    RxEntry& e = rx_fifo_[head % recv_slots_];
    const size_t take = std::min<size_t>(e.len - offset, want - got);
    out.scatter(e.data + offset, take);
    got += take;
    offset += uint32_t(take);
    if (offset == e.len) {
      ++head;
      offset = 0;
      if (!peek) {
        release(e);
        ++unreported_credits_;
      }
    }
  }
  if (!peek) {
    rx_head_ = head;
    rx_offset_ = offset;
    link_consumed_ += got;
    return_credits_if_due();
  }
  return ssize_t(got);
}

ssize_t Conn::recv(int fd, const iovec* iov, int iovcnt, int flags) {
  std::lock_guard rx(rx_lock_);
  const bool peek = flags & MSG_PEEK;
  const bool waitall = (flags & MSG_WAITALL) && !peek;
  const size_t total = iov_total(iov, iovcnt);
  if (total == 0) return 0;
  size_t got = 0;
  Deadline deadline(SO_RCVTIMEO, mode_);
  bool waited = false;
  for (;;) {
    serve_resync_nowait(fd);  // a sender blocked here must not hold back its resend
    iovec rest[64];  // the part of the caller's buffers still to fill
    const int rest_n = part_of(iov, iovcnt, got, SIZE_MAX, rest, 64);
    bool on_tcp;
    size_t tcp_limit = SIZE_MAX;
    {
      std::lock_guard lock(progress_lock_);
      progress_locked();
      if (state() == State::broken && !rx_on_tcp() && rx_head_ == rx_tail_ && !peer_fin_)
        return got ? ssize_t(got) : -ECONNRESET;
      on_tcp = rx_on_tcp();
      // TCP up to the peer's switch offset, then the link's bytes (also those a peer that
      // left the link sent before it left), then TCP again.
      if (on_tcp && peer_switch_known_ && !rx_back_on_tcp_ && !peer_resynced_ &&
          tcp_received_ < peer_switch_at_)
        tcp_limit = peer_switch_at_ - tcp_received_;
      if (!on_tcp) {
        const ssize_t n = recv_link(rest, rest_n, peek);
        if (n > 0) {
          got += size_t(n);
          if (!waitall || got == total || peek) return ssize_t(got);
          continue;
        }
        if (peer_fin_ && rx_head_ == rx_tail_) return ssize_t(got);  // end of stream
      }
    }
    if (on_tcp && tcp_skip_ > 0) {
      const int k = skip_resent(fd);
      if (k == 1) continue;
      // The stream cannot end inside bytes the peer resends.
      if (k == 0) return got ? ssize_t(got) : -ECONNRESET;
      if (k != -EAGAIN) return got ? ssize_t(got) : k;
    } else if (on_tcp) {
      iovec part[64];
      const int pn = part_of(rest, rest_n, 0, tcp_limit, part, 64);
      const ssize_t n = kernel_recv(fd, part, pn, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
      if (n > 0) {
        if (!peek) {
          std::lock_guard lock(progress_lock_);
          tcp_received_ += uint64_t(n);
        }
        got += size_t(n);
        if (!waitall || got == total || peek) return ssize_t(got);
        continue;
      }
      if (n == 0) {
        // The peer's TCP FIN. If it had switched, its switch message reached our queue
        // before the FIN left (a closing end waits for that): look once more.
        std::lock_guard lock(progress_lock_);
        progress_locked();
        if (rx_on_tcp() || link_error_) return ssize_t(got);
        continue;
      }
      if (n != -EAGAIN) return got ? ssize_t(got) : n;
    } else if (waited || nonblocking(fd, flags, mode_)) {
      // Nothing on the link. TCP after the peer's switch offset carries nothing but a
      // resync frame (its link failed) or the end of its connection (it died). A blocking
      // call first waits: wait() spins on the link and then sleeps on TCP too, so only a
      // call that found nothing while spinning pays for this look (a system call).
      char c;
      const ssize_t t = real().recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      const int err = errno;
      std::lock_guard lock(progress_lock_);
      progress_locked();
      if (rx_head_ != rx_tail_ || peer_fin_) continue;  // the link had more after all
      const int r = t > 0 ? take_resync_frame(fd) : -EAGAIN;
      if (r == 0) continue;
      if (r != -EAGAIN && r != -ENODATA) return got ? ssize_t(got) : r;
      if (r == -ENODATA || t == 0 || (t < 0 && err != EAGAIN && err != EWOULDBLOCK)) {
        // Bytes the peer sent on the link may be lost: not a clean end of stream.
        if (got) return ssize_t(got);
        return t < 0 ? -err : link_error_ ? -ECONNRESET : 0;
      }
    }
    if (got && !waitall) return ssize_t(got);
    if (nonblocking(fd, flags, mode_)) return got ? ssize_t(got) : -EAGAIN;
    if (const int w = wait(fd, WaitFor::data, deadline); w < 0) {
      if (got) return ssize_t(got);
      // The kernel restarts a recv that an SA_RESTART handler interrupted; our poll() in
      // wait() cannot be restarted by it, so the handlers decide (signal_restart.hpp).
      if (w == -EINTR && interrupted_call_restarts()) continue;
      return w;
    }
    waited = true;
  }
}

int Conn::take_resync_frame(int fd) noexcept {
  while (frame_in_got_ < sizeof frame_in_) {
    const ssize_t n = real().recv(fd, frame_in_ + frame_in_got_, sizeof frame_in_ - frame_in_got_,
                                  MSG_DONTWAIT);
    if (n == 0) {
      // The end of the connection where a frame would start is no protocol error: the
      // peer's process ended (exit without close, a crash) and recv() reports that end.
      if (frame_in_got_ == 0) return -ENODATA;
      break_connection("the RDMA peer's connection ended inside its resync frame");
      return -ECONNRESET;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    frame_in_got_ = uint8_t(frame_in_got_ + n);
  }
  ResyncFrame frame;
  memcpy(&frame, frame_in_, sizeof frame);
  const uint64_t from = get_u64(frame.resend_from);
  // The peer resends from what our credits acknowledged: never more than we received.
  if (memcmp(frame.magic, kResyncMagic, sizeof frame.magic) != 0 ||
      frame.version != kWireVersion || from > link_received_) {
    break_connection("the RDMA peer wrote something other than a resync frame on TCP");
    return -ECONNRESET;
  }
  peer_resynced_ = true;  // the link's deliveries end here (progress was just taken)
  tcp_skip_ = link_received_ - from;
  LOG_DEBUG("fd=%d verbs: the peer's link failed: its stream resumes on TCP (%llu resent "
            "bytes already received)", log_fd_, static_cast<unsigned long long>(tcp_skip_));
  fail("the RDMA link failed (the peer moved to TCP)");
  return 0;
}

int Conn::skip_resent(int fd) noexcept {
  while (tcp_skip_ > 0) {
    char scratch[4096];
    const ssize_t n =
        real().recv(fd, scratch, size_t(std::min<uint64_t>(tcp_skip_, sizeof scratch)), MSG_DONTWAIT);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    tcp_skip_ -= uint64_t(n);
  }
  return 1;
}

void Conn::serve_resync_nowait(int fd) noexcept {
  {
    std::lock_guard lock(progress_lock_);
    if (!resend_due_) return;
  }
  std::unique_lock tx(tx_lock_, std::try_to_lock);  // a sending thread serves it otherwise
  if (!tx) return;
  std::lock_guard lock(progress_lock_);
  (void)serve_resend(fd, true, false);
}

int Conn::serve_resend(int fd, bool nb, bool sending) noexcept {
  // After a link failure the frame goes first; with nothing to resend it waits for the
  // next bytes the application sends (a peer that closed meanwhile never sees it).
  while (resync_frame_left_ > 0) {
    if (!sending && !resend_due_) return 0;
    const ssize_t n = real().send(fd, resync_frame_ + sizeof resync_frame_ - resync_frame_left_,
                                  resync_frame_left_, MSG_NOSIGNAL | (nb ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    resync_frame_left_ = uint8_t(resync_frame_left_ - n);
  }
  // The bytes the peer did not consume are still in our send slots (a slot is reused only
  // once the peer returned its credit).
  while (resend_due_) {
    if (resend_from_ >= link_sent_) {
      resend_due_ = false;
      break;
    }
    if (resend_from_ < acked_bytes_) {
      resend_due_ = false;  // the peer claims less than it already acknowledged
      fail("the RDMA peer's downgrade offset is inconsistent");
      return -ECONNRESET;
    }
    uint64_t pos = acked_bytes_;
    uint64_t msg = stage_acked_;
    while (msg < stage_head_ && pos + stage_len_[msg % options_.slots] <= resend_from_)
      pos += stage_len_[msg++ % options_.slots];
    const uint32_t slot = uint32_t(msg % options_.slots);
    const size_t skip = size_t(resend_from_ - pos);
    const uint8_t* data = sent_bytes(slot) + skip;
    const size_t len = stage_len_[slot] - skip;
    const ssize_t n = real().send(fd, data, len, MSG_NOSIGNAL | (nb ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    resend_from_ += uint64_t(n);
  }
  return 0;
}

ssize_t Conn::send(int fd, const iovec* iov, int iovcnt, int flags) {
  std::lock_guard tx(tx_lock_);
  Deadline deadline(SO_SNDTIMEO, mode_);
  const ssize_t rc = send_locked(fd, iov, iovcnt, flags, deadline);
  settle_zero_copy(fd, deadline);
  return rc;
}

ssize_t Conn::send_locked(int fd, const iovec* iov, int iovcnt, int flags, Deadline& deadline) {
  const size_t total = iov_total(iov, iovcnt);
  size_t sent = 0;
  bool zero_copy = options_.zero_copy_min != 0 && total >= options_.zero_copy_min &&
                   !nonblocking(fd, flags, mode_);
  for (;;) {
    bool to_tcp;
    {
      std::lock_guard lock(progress_lock_);
      progress_locked();
      if (write_shut_) return -EPIPE;
      if (tx_resync_pending()) {
        const int rc = serve_resend(fd, nonblocking(fd, flags, mode_), true);
        if (rc == -EAGAIN) return sent ? ssize_t(sent) : -EAGAIN;
        if (rc < 0) return sent ? ssize_t(sent) : rc;
      }
      const State s = state();
      if (s == State::broken) return sent ? ssize_t(sent) : -ECONNRESET;
      if (!tx_switched_ && s == State::established && !tx_back_on_tcp_ && !link_error_ &&
          !sq_full()) {
        uint8_t payload[8];
        put_u64(payload, tcp_sent_);
        if (const int rc = post_control(Msg::switch_at, payload, 8); rc == 0) {
          tx_switched_ = true;
          LOG_DEBUG("fd=%d verbs: sends on the link after %llu bytes on TCP", log_fd_,
                    static_cast<unsigned long long>(tcp_sent_));
        } else {
          post_failed("the switch", rc);
        }
      }
      to_tcp = !tx_switched_ || tx_back_on_tcp_;
      if (!to_tcp) {
        IovCursor in(iov, iovcnt);
        in.advance(sent);
        if (total - sent > send_slot_bytes_ && send_slot_bytes_ < options_.slot_bytes &&
            stage_head_ == stage_acked_ && !send_grow_failed_)
          grow_send_slots();
        while (sent < total && can_post_data()) {
          const uint32_t slot = uint32_t(stage_head_ % options_.slots);
          const uint32_t len = uint32_t(std::min<size_t>(total - sent, send_slot_bytes_));
          forget_zero_copy_slot(slot);  // its last message was consumed: its credit came back
          // Zero-copy in full-size messages only (the small first slots are for small sends).
          const bool zc = zero_copy && len == options_.slot_bytes && zero_copy_source(in, len, slot);
          if (!zc) {
            zero_copy = false;  // not registrable: the rest of this call copies
            in.gather(buffers_ + size_t(slot) * send_slot_bytes_, len);
          }
          stage_len_[slot] = len;
          const int rc = zc ? post_data(slot, len, zc_[slot].src, zc_[slot].ref.mr->lkey)
                            : post_data(slot, len);
          if (rc != 0) {
            post_failed("data", rc);
            return sent ? ssize_t(sent) : -ECONNRESET;
          }
          if (zc) zc_last_post_ = sends_posted_;
          ++stage_head_;
          link_sent_ += len;
          sent += len;
        }
        if (sent == total) {
          end_room_wait();
          return ssize_t(sent);
        }
      }
    }
    if (to_tcp) {
      iovec rest[64];
      const int rest_n = part_of(iov, iovcnt, sent, SIZE_MAX, rest, 64);
      // Non-blocking while the link may come up: a send must not stay asleep on TCP once
      // the peer stopped reading it. A blocking caller sleeps in wait() below instead.
      const ssize_t n = kernel_send(fd, rest, rest_n, flags | MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        std::lock_guard lock(progress_lock_);
        if (!tx_switched_) tcp_sent_ += uint64_t(n);
        sent += size_t(n);
        if (sent == total) return ssize_t(sent);
        continue;
      }
      if (n != -EAGAIN) return sent ? ssize_t(sent) : n;
    }
    if (nonblocking(fd, flags, mode_)) return sent ? ssize_t(sent) : -EAGAIN;
    int64_t stall_end = 0;  // when the peer's silence gives the link up (0: no such wait)
    if (!to_tcp) {
      std::lock_guard lock(progress_lock_);
      if (room_wait_expired()) continue;  // the rest goes on TCP
      stall_end = recheck_at_locked(POLLOUT);
    }
    if (const int w = wait(fd, WaitFor::space, deadline, stall_end); w < 0) {
      if (sent) return ssize_t(sent);
      if (w == -EINTR && interrupted_call_restarts()) continue;  // as recv
      return w;
    }
  }
}

long Conn::bytes_readable(int fd) noexcept {
  std::lock_guard rx(rx_lock_);
  std::lock_guard lock(progress_lock_);
  progress_locked();
  int tcp = 0;
  if (rx_on_tcp()) {
    if (real().ioctl(fd, FIONREAD, &tcp) != 0) return -errno;
    if (peer_switch_known_ && !rx_back_on_tcp_ && !peer_resynced_ && tcp_received_ < peer_switch_at_)
      tcp = int(std::min<uint64_t>(uint64_t(tcp), peer_switch_at_ - tcp_received_));
    return long(uint64_t(tcp) - std::min<uint64_t>(uint64_t(tcp), tcp_skip_));
  }
  return long(link_received_ - link_consumed_);
}

short Conn::poll_now(int fd, short events) noexcept {
  // No drain_channel() here: the core calls poll_now() right after arming (wait_fds), and
  // taking the notification that arming produced would leave the completion queue
  // unarmed, so the next completion (the peer's data) would wake nobody. The notification
  // is taken by disarm()/after_wait(), before the next arming.
  serve_resync_nowait(fd);
  pollfd p{fd, short(events | POLLRDHUP), 0};
  (void)real().poll(&p, 1, 0);
  if ((events & (POLLIN | POLLRDNORM)) && (p.revents & POLLIN) && take_resync_bytes(fd))
    (void)real().poll(&p, 1, 0);  // what TCP holds besides them
  std::lock_guard lock(progress_lock_);
  progress_locked();
  short rev = short(p.revents & (POLLERR | POLLHUP | POLLNVAL));
  if (state() == State::broken) return short(rev | POLLERR | (events & (POLLIN | POLLOUT)));
  if (rx_on_tcp()) {
    if (tcp_skip_ == 0 || (p.revents & (POLLRDHUP | POLLHUP)))
      rev |= short(p.revents & (events & (POLLIN | POLLRDHUP | POLLRDNORM)));
  } else if (rx_head_ != rx_tail_ || peer_fin_ || peer_left_ || read_shut_ ||
             (p.revents & (POLLIN | POLLRDHUP))) {
    rev |= short(events & (POLLIN | POLLRDNORM));
    // After shutdown(SHUT_RD) the kernel reports the socket read-hung-up, as at a FIN.
    if ((peer_fin_ || read_shut_) && (events & POLLRDHUP)) rev |= POLLRDHUP;
  }
  if (events & (POLLOUT | POLLWRNORM)) {
    if (!tx_switched_ || tx_back_on_tcp_)
      rev |= short(p.revents & (events & (POLLOUT | POLLWRNORM)));
    else if (can_post_data() || write_shut_) {
      end_room_wait();
      rev |= short(events & (POLLOUT | POLLWRNORM));
    } else if (room_wait_expired()) {
      // Our stream goes on on TCP: writable when the kernel's buffer has room.
      pollfd w{fd, POLLOUT, 0};
      if (real().poll(&w, 1, 0) > 0) rev |= short(w.revents & (events & (POLLOUT | POLLWRNORM)));
    }
  }
  return rev;
}

bool Conn::room_wait_expired() noexcept {
  // Only a stream whose switch the peer is known to have: fail() resyncs it on TCP then
  // (otherwise it would reset the connection; a wait that long without the switch's
  // completion is left to the link's own failure handling).
  if (!tx_switched_ || tx_back_on_tcp_ || link_error_ || !switch_confirmed_ ||
      credits_available() > 0 || state() != State::established)
    return false;
  const int64_t now = now_ns();
  const int64_t since = room_wait_since_.load(std::memory_order_relaxed);
  if (since == 0 || stage_acked_ != room_wait_acked_) {
    // The clock (re)starts: the first look, or the peer consumed something since the last.
    if (room_wait_since_.exchange(now, std::memory_order_relaxed) == 0)
      Transport::timed_waits.fetch_add(1, std::memory_order_relaxed);
    room_wait_acked_ = stage_acked_;
    return false;
  }
  if (now < since + kStalledLinkNs) return false;
  LOG_DEBUG("fd=%d verbs: the peer consumed nothing for 1 s while this end waited for "
            "room: the connection continues on TCP", log_fd_);
  fail("the peer consumed nothing for 1 s while this end waited for room (TCP buffers more)");
  return true;
}

void Conn::end_room_wait() noexcept {
  if (room_wait_since_.load(std::memory_order_relaxed) != 0 &&
      room_wait_since_.exchange(0, std::memory_order_relaxed) != 0)
    Transport::timed_waits.fetch_sub(1, std::memory_order_relaxed);
}

int64_t Conn::recheck_at_locked(short events) const noexcept {
  const int64_t since = room_wait_since_.load(std::memory_order_relaxed);
  if (!(events & POLLOUT) || since == 0 || !tx_switched_ || tx_back_on_tcp_ || link_error_)
    return 0;
  return since + kStalledLinkNs;
}

int64_t Conn::recheck_at(short events) noexcept {
  std::lock_guard lock(progress_lock_);
  return recheck_at_locked(events);
}

bool Conn::take_resync_bytes(int fd) noexcept {
  std::unique_lock rx(rx_lock_, std::try_to_lock);  // a receiving thread takes them otherwise
  if (!rx) return false;
  std::lock_guard lock(progress_lock_);
  progress_locked();
  bool took = false;
  // On the link with nothing left there, readable TCP is the peer's resync frame.
  if (!rx_on_tcp() && rx_head_ == rx_tail_ && !peer_fin_ && !peer_resynced_ &&
      state() != State::broken) {
    (void)take_resync_frame(fd);
    took = true;
  }
  if (rx_on_tcp() && tcp_skip_ > 0) {
    (void)skip_resent(fd);
    took = true;
  }
  return took;
}

int Conn::wait_fds(int fd, short events, pollfd* out) noexcept {
  {
    std::lock_guard lock(progress_lock_);
    if (cq_) (void)ibv_req_notify_cq(cq_, 0);
  }
  // TCP's end matters to a reader (the peer's end or resync frame comes there). A waiter
  // for room only must not watch it: after the peer's half-close TCP stays readable for
  // good and would wake it at once, for ever (a busy loop); the link's failure wakes it
  // through the wake-up set.
  short tcp = events;
  if (events & (POLLIN | POLLRDNORM | POLLRDHUP)) tcp |= POLLRDHUP;
  bool failed;
  {
    std::lock_guard lock(progress_lock_);
    // Room on the link comes through the channel: TCP, writable all along, would wake
    // a writer waiting for credits at once and for ever (a busy loop).
    if (tx_switched_ && !tx_back_on_tcp_) tcp &= short(~(POLLOUT | POLLWRNORM));
    if (resend_due_) tcp |= POLLOUT;  // poll_now serves the resend when it fits
    failed = link_error_;
  }
  int n = 0;
  if (!failed) out[n++] = pollfd{wake_fd_, POLLIN, 0};  // always readable once failed
  out[n++] = pollfd{fd, tcp, 0};
  return n;
}

void Conn::after_wait(bool /*edge_watched: the channel's events are taken either way*/) noexcept {
  std::lock_guard lock(progress_lock_);
  drain_channel();
}

bool Conn::settled() const noexcept {
  const State s = state();
  const bool rx_settled = !peer_switch_known_ || rx_back_on_tcp_ ||
                          (peer_left_ && rx_head_ == rx_tail_) ||
                          (peer_resynced_ && rx_head_ == rx_tail_ && tcp_skip_ == 0);
  const bool tx_settled =
      !tx_switched_ || (tx_back_on_tcp_ && resync_frame_left_ == 0 && !resend_due_);
  return s == State::tcp && tx_settled && rx_settled && !resend_due_;
}

int Conn::shutdown(int fd, int how) noexcept {
  if (how == SHUT_WR || how == SHUT_RDWR) {
    std::lock_guard tx(tx_lock_);
    std::lock_guard lock(progress_lock_);
    if (tx_switched_ && !tx_back_on_tcp_ && !fin_sent_ && !link_error_) {
      if (post_control(Msg::fin, nullptr, 0) == 0) fin_sent_ = true;
    }
    write_shut_ = true;
  }
  if (how == SHUT_RD || how == SHUT_RDWR) read_shut_ = true;
  // The FIN on the link must reach the peer before TCP's.
  if (fin_sent_) {
    const int64_t end = now_ns() + kCloseWaitNs;
    for (;;) {
      {
        std::lock_guard lock(progress_lock_);
        progress_locked();
        if (sends_in_flight_ == 0 || link_error_) break;
      }
      if (now_ns() > end) break;
      sched_yield();
    }
  }
  return real().shutdown(fd, how) == 0 ? 0 : -errno;
}

void Conn::downgrade(int fd, const char* why) noexcept {
  std::lock_guard tx(tx_lock_);
  std::lock_guard rx(rx_lock_);
  std::lock_guard lock(progress_lock_);
  progress_locked();
  if (tx_resync_pending()) (void)serve_resend(fd, false, true);
  if (link_error_ && peer_switch_known_ && !rx_back_on_tcp_ && !peer_left_ && !peer_resynced_ &&
      tcp_received_ >= peer_switch_at_)
    // Its bytes on the failed link cannot follow, and its resync frame, when it comes, is
    // read as data by whoever holds the socket now: a known limit (docs/verbs.md, Failure).
    LOG_WARN("fd=%d verbs: handed to the kernel while the peer's stream was on a failed link: "
             "its next bytes may not be what it sent", log_fd_);
  // Our link stream ends here. A peer that may still see the connection come up (it
  // accepted, or we asked) hears it too, so it never switches to a link nobody reads.
  LeaveOrder order = LeaveOrder::unknown;
  uint64_t peer_consumed = 0;
  if (state() == State::established && !link_error_ && qp_)
    order = leave_order(&peer_consumed);
  else if (state() == State::connecting)
    // Sent by on_established, if the link comes up: only then is the peer's queue pair
    // sure to take it (a message reaching a queue pair not ready yet is dropped).
    downgrade_unsent_ = true;
  const bool keep = order == LeaveOrder::second ||
                    (order == LeaveOrder::unknown && (peer_left_ || peer_resynced_));
  // Left by the rule without the peer's word: a peer that found our word set and waits
  // for our finding learns what we do (a dropping end is to it as one that came first).
  if (order == LeaveOrder::unknown && own_leave_ != Leave::on_link)
    publish_leave(keep ? Leave::second : Leave::first);
  if (order != LeaveOrder::unknown)
    LOG_DEBUG("fd=%d verbs: left the link %s", log_fd_,
              order == LeaveOrder::first    ? "first"
              : order == LeaveOrder::second ? "second, after the peer"
                                            : "at the same moment as the peer");
  if (order == LeaveOrder::first && resend_due_) {
    // The peer keeps what we sent on the link. Its own `downgrade`, posted before it read
    // our word, asks for a resend from what it had consumed: taken during our leave (it can
    // come in with the answer to our read), it must not be served, or the peer gets those
    // bytes twice. Taken later, it finds tx_switched_ clear and is ignored.
    LOG_DEBUG("fd=%d verbs: the peer's downgrade came in while we left first: it keeps what "
              "we sent on the link, nothing is resent", log_fd_);
    resend_due_ = false;
  }
  if (order == LeaveOrder::crossed && tx_switched_ && !tx_back_on_tcp_) {
    // The peer dropped what it did not consume, as we do below: it is resent first.
    resend_from_ = peer_consumed;
    resend_due_ = true;
  }
  tx_back_on_tcp_ = true;
  end_room_wait();
  if (keep) {
    // The peer left the link first (or resynced after a failure): its stream went on on
    // TCP right after the link bytes still queued here (a resync's resent bytes are
    // skipped by their count), so nobody would send them again. They are kept, in memory
    // of our own (a forked child inherits it; the pool's slots stay the parent's), and
    // read before TCP.
    if (!copy_out_held()) break_connection("out of memory for the bytes the peer left on the link");
    else if (link_received_ > link_consumed_)
      // Only this process can read them: right after fork (parent or child), not after an
      // exec or in another process the descriptor goes to (docs/verbs.md, Downgrade).
      LOG_DEBUG("fd=%d verbs: %llu bytes the peer sent before it left the link are kept here, "
                "read before TCP", log_fd_,
                static_cast<unsigned long long>(link_received_ - link_consumed_));
  } else {
    // Unconsumed link bytes are dropped: the peer sends them again on TCP.
    rx_back_on_tcp_ = true;
    release_queued();
  }
  // What the peer did not consume goes on TCP before anything this process (or a forked
  // child) sends next. Both ends resend when they crossed, each in its own downgrade: a
  // resend larger than the kernel's buffers then waits for a reader on neither side, so
  // that wait is bounded (the connection is reset rather than hang).
  if (order == LeaveOrder::crossed)
    serve_resend_within(fd, now_ns() + kLeaveWaitNs);
  else if (tx_resync_pending() && state() != State::broken)
    (void)serve_resend(fd, false, true);
  if (state() != State::broken) {
    fallback_reason_ = why;
    state_.store(State::tcp, std::memory_order_release);
  }
  tx_switched_ = false;
}

void Conn::serve_resend_within(int fd, int64_t end_ns) noexcept {
  while (tx_resync_pending() && state() != State::broken) {
    const int rc = serve_resend(fd, true, true);
    if (!tx_resync_pending()) return;
    if (rc != -EAGAIN) return;  // the peer's connection is gone: its end says so
    if (now_ns() > end_ns) {
      break_connection("the resend to an RDMA peer that left the link at the same moment "
                       "did not fit in the kernel's buffers");
      return;
    }
    pollfd p{fd, POLLOUT, 0};
    (void)real().poll(&p, 1, 10);
  }
}

void Conn::post_downgrade() noexcept {
  uint8_t payload[8];
  put_u64(payload, link_consumed_);
  if (post_control(Msg::downgrade, payload, 8) == 0) downgrade_unsent_ = false;
}

void Conn::announce_leave_word() noexcept {
  if (!qp_ || !leave_mr_) return;
  auto* payload = reinterpret_cast<uint8_t*>(leave_ + 2);
  put_u64(payload, uint64_t(reinterpret_cast<uintptr_t>(leave_)));
  put_u32(payload + 8, leave_mr_->rkey);
  // Without it the peer's downgrades keep the old rule (leave_order: unknown).
  if (const int rc = post_control(Msg::leave_word, payload, 12, leave_mr_->lkey); rc != 0)
    LOG_DEBUG("fd=%d verbs: posting the leave word failed: %s", log_fd_, strerror(std::abs(rc)));
}

void Conn::publish_leave(Leave state) noexcept {
  uint8_t bytes[8];
  put_u64(bytes, make_leave(state, link_consumed_));
  uint64_t word;
  memcpy(&word, bytes, sizeof word);
  // One 8-byte store, ordered before the read of the peer's word that follows (Dekker).
  __atomic_store_n(leave_, word, __ATOMIC_SEQ_CST);
  own_leave_ = state;
}

bool Conn::send_room(int64_t end_ns) noexcept {
  for (;;) {
    if (link_error_ || !qp_) return false;
    if (!sq_full()) return true;
    progress_locked();
    if (now_ns() > end_ns) return false;
    sched_yield();
  }
}

bool Conn::read_peer_leave(int64_t end_ns, uint64_t* word, bool first_read) noexcept {
  if (!send_room(end_ns)) return false;
  ibv_sge sge{reinterpret_cast<uintptr_t>(leave_ + 1), 8, leave_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = kWrLeaveRead;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peer_leave_addr_;
  wr.wr.rdma.rkey = peer_leave_rkey_;
  leave_read_done_ = false;
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(qp_, &wr, &bad); rc != 0) {
    post_failed("the read of the peer's leave word", rc);
    return false;
  }
  ++sends_in_flight_;
  ++sends_posted_;
  // A test holds an end here so that the peer's downgrade comes in with the answer
  // (rdma_fork_both's third round).
  if (first_read) hold_for_test("FASTSOCK_TEST_VERBS_LEAVE_READ_PAUSE_MS");
  while (!leave_read_done_) {
    progress_locked();
    if (leave_read_done_) break;
    if (link_error_ || now_ns() > end_ns) return false;
    sched_yield();
  }
  uint8_t bytes[8];
  const uint64_t raw = __atomic_load_n(leave_ + 1, __ATOMIC_ACQUIRE);
  memcpy(bytes, &raw, sizeof bytes);
  *word = get_u64(bytes);
  return true;
}

// Why it works: each end stores `leaving` before it reads the other's word, so at least one
// of them finds the other's set (the reads run on the devices, after the stores). An end
// that finds it clear (`first`) posted its downgrade before reading, so the peer, which
// starts leaving later, takes that downgrade before its own read returns: it resends what
// we did not consume and keeps what we sent (`second`). An end that finds it set publishes
// `saw` and waits for the peer's finding: `first` makes it the second; `saw` means both
// found the other leaving, and both resend (`crossed`). Both ends reach the same answer.
Conn::LeaveOrder Conn::leave_order(uint64_t* peer_consumed) noexcept {
  int64_t end = now_ns() + kLeaveWaitNs;
  publish_leave(Leave::leaving);
  // The downgrade must go out: it ends our link stream (a full send queue is waited out).
  if (send_room(end)) post_downgrade();
  if (!peer_leave_known_ || !leave_mr_) return LeaveOrder::unknown;
  // A test holds both ends here so that each finds the other leaving (rdma_fork_both).
  hold_for_test("FASTSOCK_TEST_VERBS_LEAVE_PAUSE_MS");
  end = now_ns() + kLeaveWaitNs;
  uint64_t peer = 0;
  if (!read_peer_leave(end, &peer, true)) {
    LOG_DEBUG("fd=%d verbs: cannot read the peer's leave word", log_fd_);
    return LeaveOrder::unknown;
  }
  if (leave_state(peer) == uint8_t(Leave::on_link)) {
    publish_leave(Leave::first);
    return LeaveOrder::first;
  }
  publish_leave(Leave::saw);
  while (leave_state(peer) == uint8_t(Leave::leaving)) {
    sched_yield();
    if (now_ns() > end || !read_peer_leave(end, &peer)) {
      break_connection("the RDMA peer did not finish leaving the link");
      return LeaveOrder::unknown;
    }
  }
  if (leave_state(peer) == uint8_t(Leave::second)) {
    // The peer took our downgrade before it left, and keeps what we sent: as if first.
    publish_leave(Leave::first);
    return LeaveOrder::first;
  }
  if (leave_state(peer) == uint8_t(Leave::saw)) {
    *peer_consumed = leave_consumed(peer);
    LOG_DEBUG("fd=%d verbs: both ends left the link at once: each resends what the other did "
              "not consume (%llu of ours)", log_fd_,
              static_cast<unsigned long long>(link_sent_ - std::min(link_sent_, *peer_consumed)));
    return LeaveOrder::crossed;
  }
  if (leave_state(peer) != uint8_t(Leave::first)) {
    break_connection("the RDMA peer's leave word is not one");
    return LeaveOrder::unknown;
  }
  // The peer left first: its downgrade, posted before it read our word, ends its link
  // stream; what came before it is kept here.
  while (!peer_left_) {
    progress_locked();
    if (peer_left_) break;
    if (link_error_ || now_ns() > end) {
      break_connection("the RDMA peer's downgrade did not arrive");
      return LeaveOrder::unknown;
    }
    sched_yield();
  }
  return LeaveOrder::second;
}

bool Conn::still_our_socket(int fd) const noexcept {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == socket_ino_;
}

void Conn::set_socket(int fd, SocketMode* mode) noexcept {
  log_fd_ = fd;
  mode_ = mode;
  struct stat st;
  socket_ino_ = fstat(fd, &st) == 0 ? st.st_ino : 0;
}

void Conn::close(int fd) noexcept {
  // Moved to TCP while the link was coming up: the peer may still see it come up and
  // switch to it, so it must hear our downgrade (on_established posts it) before this end
  // goes. Bounded; only a connection downgraded mid-connect (fork, exec) waits here.
  const int64_t connect_end = now_ns() + kCloseWaitNs;
  while (getpid() == owner_pid_ && now_ns() < connect_end) {
    {
      std::lock_guard lock(progress_lock_);
      if (!downgrade_unsent_ || link_error_ || !id_) break;
    }
    const timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
  {
    std::lock_guard lock(progress_lock_);
    progress_locked();
    if (tx_switched_ && !tx_back_on_tcp_ && !fin_sent_ && !link_error_ && qp_ &&
        !abortive_close_) {
      if (post_control(Msg::fin, nullptr, 0) == 0) fin_sent_ = true;
    }
  }
  // The peer must find our last messages on its queue before TCP's FIN (see recv()).
  const int64_t end = now_ns() + kCloseWaitNs;
  for (;;) {
    {
      std::lock_guard lock(progress_lock_);
      progress_locked();
      if (sends_in_flight_ == 0 || link_error_ || !cq_) break;
    }
    if (now_ns() > end) break;
    sched_yield();
  }
  // A link that failed leaves our stream's end to TCP: the resync frame and the bytes the
  // peer did not acknowledge go before the kernel's FIN. Bounded, like the kernel's own
  // delivery cannot be: a peer that reads nothing more gets ECONNRESET, not a short stream.
  const int64_t resend_end = now_ns() + kCloseWaitNs;
  bool owed;
  {
    std::lock_guard lock(progress_lock_);
    owed = tx_resync_pending() && !abortive_close_;  // a reset discards them, as the kernel's
  }
  while (owed && still_our_socket(fd)) {
    int rc;
    {
      std::lock_guard lock(progress_lock_);
      if (!tx_resync_pending()) break;
      rc = serve_resend(fd, true, true);
      if (!tx_resync_pending()) break;
    }
    if ((rc != 0 && rc != -EAGAIN) || now_ns() > resend_end) break;
    pollfd p{fd, POLLOUT, 0};
    (void)real().poll(&p, 1, 10);
  }
  if (zc_bytes_ > 0) {
    const RegCache::Counters c = RegCache::get().counters();
    LOG_DEBUG("fd=%d verbs: %llu bytes sent zero-copy, %llu of them copied aside at the send's "
              "return; the process's registration cache: %llu hits, %llu registrations, "
              "%llu invalidated", log_fd_, static_cast<unsigned long long>(zc_bytes_),
              static_cast<unsigned long long>(zc_copied_aside_),
              static_cast<unsigned long long>(c.hits),
              static_cast<unsigned long long>(c.registrations),
              static_cast<unsigned long long>(c.invalidated));
  }
  if (id_ && getpid() == owner_pid_ && !link_error_) {
    ReentryGuard guard;
    (void)lib_.rdma_disconnect(id_);
  }
}

}  // namespace fastsock::verbs
