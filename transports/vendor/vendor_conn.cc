#include "vendor_conn.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "cancel_point.hpp"
#include "config_load.hpp"
#include "internal_fds.hpp"
#include "iov_cursor.hpp"
#include "link_io.hpp"
#include "log.hpp"
#include "real.hpp"
#include "signal_restart.hpp"

namespace fastsock::vendors {

namespace {

using link_io::Deadline;
using link_io::iov_total;
using link_io::kernel_recv;
using link_io::kernel_send;
using link_io::nonblocking;
using link_io::now_ns;
using link_io::SpinBudget;

// TCP ended while the peer's vendor stream had not: its end (the library's shutdown)
// normally comes first; after this long without it, bytes may be lost: reset.
constexpr int64_t kEofGraceNs = 2'000'000'000;

// The part of `iov` after `skip` bytes, at most `max` bytes of it.
int part_of(const iovec* iov, int n, size_t skip, size_t max, iovec* out, int out_max) noexcept {
  IovCursor cursor(iov, n);
  cursor.advance(skip);
  size_t covered;
  return cursor.slice(max, out, out_max, &covered);
}

bool would_block(int err) noexcept { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

}  // namespace

Conn::Conn() noexcept : owner_pid_(getpid()) {}

Conn::~Conn() {
  if (wake_ >= 0) internal_fds::close(wake_);
  if (notify_ >= 0) internal_fds::close(notify_);
}

int Conn::start(int fd, bool acceptor, const TcpKey& key, const stats::Endpoint& dst,
                Service* const* services, int count, const char** why) noexcept {
  log_fd_ = fd;
  acceptor_ = acceptor;
  notify_ = internal_fds::take(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // not interposed calls
  wake_ = internal_fds::take(real().epoll_create1(EPOLL_CLOEXEC));
  if (notify_ < 0 || wake_ < 0) {
    *why = "no descriptor for the wake-up set";
    return -EMFILE;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (real().epoll_ctl(wake_, EPOLL_CTL_ADD, notify_, &ev) != 0) {
    *why = "cannot watch the link's notifications";
    return -errno;
  }
  service_count_ = std::min(count, kMaxServices);
  std::copy(services, services + service_count_, services_);
  uint64_t nonce = 0;
  if (getentropy(&nonce, sizeof nonce) != 0) nonce = uint64_t(now_ns()) ^ uint64_t(getpid());
  if (acceptor) {
    waiting_on_ = service_count_;
    for (int i = 0; i < service_count_; ++i) services_[i]->add_acceptor(this, key);
  } else {
    services_[0]->start_connector(this, dst, key, nonce);
  }
  return 0;
}

void Conn::notify() noexcept {
  const uint64_t one = 1;
  (void)!real().write(notify_, &one, sizeof one);
}

void Conn::on_ready() noexcept { notify(); }

void Conn::on_linked(int profile, int vfd) noexcept {
  std::lock_guard lock(state_lock_);
  svc_ = Service::running(size_t(profile));
  vfd_ = vfd;  // ours to close from here, whatever happens
  api_ = &svc_->api();
  poll_readiness_ = svc_->poll_readiness();
  if (state() != State::connecting) {
    // Moved to TCP meanwhile (fork, exec, ...): the peer must never switch.
    const wire::StreamHeader h = wire::stream_header(wire::Kind::leave, 0);
    (void)api_->send(vfd, &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
    return;
  }
  if (!poll_readiness_) {
    epoll_event ev{};  // no events until a waiter asks (arm)
    if (real().epoll_ctl(wake_, EPOLL_CTL_ADD, vfd, &ev) != 0) {
      to_tcp_locked("cannot watch the vendor descriptor");
      notify();
      return;
    }
  }
  state_.store(State::linked, std::memory_order_release);
  LOG_DEBUG("fd=%d vendor: linked through %s", log_fd_, svc_->profile().name.c_str());
  notify();
}

void Conn::on_link_failed(int profile, const char* why, int err, bool retrying) noexcept {
  std::lock_guard lock(state_lock_);
  // The latest failure is the one that decided: the connection's reason names only that
  // profile (every failure is in the debug log; `fastsock info` says why profiles are unusable).
  snprintf(reason_, sizeof reason_, "%s: %s%s%s%s", Service::profile(size_t(profile)).name.c_str(),
           why, err ? " (" : "", err ? strerrordesc_np(err) : "", err ? ")" : "");
  LOG_DEBUG("fd=%d vendor: %s: %s", log_fd_, Service::profile(size_t(profile)).name.c_str(), why);
  if (retrying || (acceptor_ && --waiting_on_ > 0)) return;
  if (state() == State::connecting) state_.store(State::tcp, std::memory_order_release);
  notify();
}

void Conn::to_tcp_locked(const char* why) noexcept {
  snprintf(reason_, sizeof reason_, "%s", why);
  state_.store(State::tcp, std::memory_order_release);
}

void Conn::reset(int fd, const char* why) noexcept {
  {
    std::lock_guard lock(state_lock_);
    if (state() == State::broken) return;
    snprintf(reason_, sizeof reason_, "reset: %s", why);
    state_.store(State::broken, std::memory_order_release);
  }
  LOG_DEBUG("fd=%d vendor: the connection is reset: %s", log_fd_, why);
  if (vfd_ >= 0 && getpid() == owner_pid_) svc_->shutdown(vfd_, SHUT_RDWR, false);
  // connect(AF_UNSPEC) resets an established TCP connection (RST): the peer reads
  // ECONNRESET as from any reset, whichever stream it was reading.
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  (void)real().connect(fd, &unspec, sizeof unspec);
  notify();
}

bool Conn::settled() noexcept {
  std::unique_lock tx(tx_lock_, std::try_to_lock);
  std::unique_lock rx(rx_lock_, std::try_to_lock);
  if (!tx || !rx || state() != State::tcp) return false;
  const bool tx_done = !tx_switched_ || (tx_left_ && header_left_ == 0);
  const bool rx_done = peer_ != Peer::switched || rx_left_ ||
                       (peer_resynced_ && vendor_received_ == peer_vendor_end_);
  return tx_done && rx_done;
}

short Conn::vendor_revents(short events) noexcept {
  pollfd p{vfd_, events, 0};
  const int n = poll_through(*api_, poll_readiness_, &p, 1, 0);
  return n > 0 ? p.revents : 0;
}

ssize_t Conn::vendor_send(const iovec* iov, int iovcnt) noexcept {
  const int flags = MSG_NOSIGNAL | MSG_DONTWAIT;
  if (api_->sendmsg) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = size_t(iovcnt);
    return api_->sendmsg(vfd_, &m, flags);
  }
  for (int i = 0; i < iovcnt; ++i)
    if (iov[i].iov_len) return api_->send(vfd_, iov[i].iov_base, iov[i].iov_len, flags);
  return 0;
}

ssize_t Conn::vendor_recv(const iovec* iov, int iovcnt, bool peek) noexcept {
  const int flags = MSG_DONTWAIT | (peek ? MSG_PEEK : 0);
  if (api_->recvmsg) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = size_t(iovcnt);
    // The flags go in msg_flags too: rsocket's rrecvmsg reads them from there and ignores
    // its argument (rdma-core librdmacm/rsocket.c), so MSG_DONTWAIT was lost and a recv
    // blocked inside the library, taking the completion events the service thread's rpoll
    // sleeps on: streams stalled (iperf3 in the Soft-RoCE VM). Libraries that follow POSIX
    // ignore msg_flags on input.
    m.msg_flags = flags;
    return api_->recvmsg(vfd_, &m, flags);
  }
  for (int i = 0; i < iovcnt; ++i)
    if (iov[i].iov_len) return api_->recv(vfd_, iov[i].iov_base, iov[i].iov_len, flags);
  return 0;
}

void Conn::take_peer_header(int fd) noexcept {
  if (peer_ != Peer::unknown || rx_left_ || state() != State::linked) return;
  if (!read_peer_header(fd)) return;
  wire::StreamHeader h;
  memcpy(&h, header_in_, sizeof h);
  if (h.kind == uint8_t(wire::Kind::ack)) {  // the peer read our Switch; its header follows
    peer_acked_ = true;
    header_got_ = 0;
    if (!read_peer_header(fd)) return;
    memcpy(&h, header_in_, sizeof h);
  }
  if (h.kind == uint8_t(wire::Kind::switch_at)) {
    peer_ = Peer::switched;
    peer_switch_at_ = wire::get_be(h.offset, 8);
    carried_.store(true, std::memory_order_relaxed);
    LOG_DEBUG("fd=%d vendor: the peer's stream continues on the vendor link after %llu bytes on TCP",
              log_fd_, static_cast<unsigned long long>(peer_switch_at_));
    // Tell the peer, so that it may leave the link cleanly later (vendor_wire.hpp, Ack).
    // A sender holding the tx lock writes it at its next round instead.
    ack_due_.store(true, std::memory_order_relaxed);
    if (std::unique_lock tx(tx_lock_, std::try_to_lock); tx) send_ack_if_due(fd);
    return;
  }
  if (h.kind != uint8_t(wire::Kind::leave))
    return reset(fd, "the peer wrote a stream header of an unknown kind");
  peer_ = Peer::left;
  peer_left(fd, false);
}

bool Conn::read_peer_header(int fd) noexcept {
  while (header_got_ < sizeof header_in_) {
    const ssize_t n = api_->recv(vfd_, header_in_ + header_got_, sizeof header_in_ - header_got_,
                                 MSG_DONTWAIT);
    if (n < 0 && would_block(errno)) return false;
    if (n <= 0) {
      // The vendor connection ended before the peer switched: its stream stays on TCP.
      if (header_got_ == 0) {
        peer_ = Peer::left;
        peer_left(fd, true);
      } else {
        reset(fd, "the vendor connection ended inside the peer's stream header");
      }
      return false;
    }
    header_got_ = uint8_t(header_got_ + n);
  }
  wire::StreamHeader h;
  memcpy(&h, header_in_, sizeof h);
  if (memcmp(h.magic, wire::kHeaderMagic, 4) != 0 || h.version != wire::kVersion) {
    reset(fd, "the peer wrote something other than a stream header");
    return false;
  }
  return true;
}

bool Conn::send_header(int fd, wire::Kind kind, uint64_t offset) noexcept {
  const wire::StreamHeader h = wire::stream_header(kind, offset);
  const auto* p = reinterpret_cast<const uint8_t*>(&h);
  size_t left = sizeof h;
  // Nothing of our stream is on the connection yet, so its buffer takes 16 bytes at once;
  // a library that makes room lazily gets a short, bounded wait.
  for (int tries = 0; left > 0 && tries < 100; ++tries) {
    const ssize_t n = api_->send(vfd_, p + sizeof h - left, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      left -= size_t(n);
      continue;
    }
    if (n < 0 && !would_block(errno)) break;
    pollfd w{vfd_, POLLOUT, 0};
    (void)poll_through(*api_, poll_readiness_, &w, 1, 10);
  }
  if (left == sizeof h) return false;
  // Part of a header and nothing more: the peer could never read our stream again.
  if (left > 0) reset(fd, "the vendor connection took only part of a stream header");
  return left == 0;
}

void Conn::send_ack_if_due(int fd) noexcept {
  if (!ack_due_.exchange(false, std::memory_order_relaxed)) return;
  // Once our own Switch or Leave is out, raw bytes or nothing follow: no room for an Ack
  // (the peer then cannot leave cleanly, and resets if it must leave: docs/vendor.md).
  if (tx_switched_ || tx_left_ || state() != State::linked) return;
  if (send_header(fd, wire::Kind::ack, 0))
    LOG_DEBUG("fd=%d vendor: confirmed the peer's switch", log_fd_);
}

// rx lock held (the tx lock is taken here: a sender never waits for the rx lock).
void Conn::peer_left(int fd, bool ended) noexcept {
  std::lock_guard tx(tx_lock_);
  // The vendor connection just ended (the peer closed it, its stream never switched):
  // our stream on it goes on until a send fails, as on a TCP connection the peer closed.
  if (ended && tx_on_vendor()) return;
  if (tx_on_vendor()) {
    // Our bytes are in the peer's library, which the peer no longer reads.
    return reset(fd, "the peer left the vendor link while our stream was on it");
  }
  tx_left_ = true;
  std::lock_guard lock(state_lock_);
  if (state() == State::linked) to_tcp_locked("the peer left the vendor link");
}

int Conn::take_resync_frame(int fd) noexcept {
  while (frame_got_ < sizeof frame_in_) {
    const ssize_t n = real().recv(fd, frame_in_ + frame_got_, sizeof frame_in_ - frame_got_,
                                  MSG_DONTWAIT);
    if (n == 0) return 0;
    if (n < 0) return would_block(errno) ? -EAGAIN : -errno;
    frame_got_ = uint8_t(frame_got_ + n);
  }
  wire::ResyncFrame f;
  memcpy(&f, frame_in_, sizeof f);
  peer_vendor_end_ = wire::get_be(f.vendor_bytes, 8);
  if (memcmp(f.magic, wire::kResyncMagic, 4) != 0 || f.version != wire::kVersion ||
      peer_vendor_end_ < vendor_received_) {
    reset(fd, "the peer wrote something other than a resync frame on TCP");
    return -ECONNRESET;
  }
  peer_resynced_ = true;
  LOG_DEBUG("fd=%d vendor: the peer left the link after %llu vendor bytes", log_fd_,
            static_cast<unsigned long long>(peer_vendor_end_));
  peer_left(fd, false);
  return 1;
}

bool Conn::rx_on_vendor() const noexcept {
  if (peer_ != Peer::switched || rx_left_ || tcp_received_ < peer_switch_at_) return false;
  return !peer_resynced_ || vendor_received_ < peer_vendor_end_;
}

void Conn::watch_for_waiter(short vendor_events) noexcept {
  // (The service returns at once when it watches these events already.)
  arm(short(waiter_events_.load(std::memory_order_relaxed) | vendor_events));
}

short Conn::arm(short vendor_events) noexcept {
  if (sleepers_[0].load(std::memory_order_seq_cst) > 0) vendor_events |= POLLIN;
  if (sleepers_[1].load(std::memory_order_seq_cst) > 0) vendor_events |= POLLOUT;
  if (vfd_ < 0 || state() != State::linked) vendor_events = 0;
  if (vendor_events && poll_readiness_) {
    svc_->arm(this, vfd_, vendor_events);
  } else if (!poll_readiness_ && vfd_ >= 0 && vendor_events != vfd_events_) {
    epoll_event ev{};
    ev.events = uint32_t(uint16_t(vendor_events));
    if (real().epoll_ctl(wake_, EPOLL_CTL_MOD, vfd_, &ev) == 0) vfd_events_ = vendor_events;
  }
  return vendor_events;
}

FASTSOCK_CANCELLATION_POINT
int Conn::wait(int fd, short vendor_events, short tcp_events, Deadline& deadline) {
  // A library seen only through its own poll is watched by the service thread alone, even
  // for a blocking call: rsocket's rpoll is not safe with two threads polling one rsocket
  // (each arming yields one completion event, which either may take: the other then
  // sleeps through the data, and with a blocking event channel it blocks in rsocket).
  SpinBudget spin(config().spin_us);  // lives until the wait ends: the history needs its length
  if (vendor_events && vfd_ >= 0 && state() == State::linked) {
    // Spin first, as the verbs link does: a reply within the budget is taken without the
    // service thread's two wake-ups (the library's poll with timeout 0 takes no events).
    while (spin.more())
      if (vendor_revents(vendor_events) & (vendor_events | POLLHUP | POLLERR)) return 0;
  }
  int timeout_ms = deadline.poll_ms(fd);
  if (timeout_ms == 0) return -EAGAIN;
  if (tcp_eof_ns_) timeout_ms = timeout_ms < 0 ? 100 : std::min(timeout_ms, 100);
  // Counted before arming, so that a waiter of the other kind that wakes meanwhile
  // re-arms for us too (pass_on_wakeup).
  std::atomic<int>* sleepers = vendor_events & POLLIN    ? &sleepers_[0]
                               : vendor_events & POLLOUT ? &sleepers_[1]
                                                         : nullptr;
  if (sleepers) sleepers->fetch_add(1, std::memory_order_seq_cst);
  arm(vendor_events);
  pollfd p[2];
  nfds_t nfds = 0;
  p[nfds++] = pollfd{wake_, POLLIN, 0};
  // After TCP's end only the link is news (TCP would be readable for ever).
  if (tcp_events != 0 || !tcp_eof_ns_) p[nfds++] = pollfd{fd, short(tcp_events | POLLRDHUP), 0};
  const int rc = real().poll(p, nfds, timeout_ms);
  const int err = errno;
  if (sleepers) sleepers->fetch_sub(1, std::memory_order_seq_cst);
  drain_notifications();
  pass_on_wakeup();
  if (rc < 0) return -err;
  if (rc == 0 && deadline.passed(fd)) return -EAGAIN;
  return 0;
}

void Conn::drain_notifications() noexcept {
  uint64_t v;
  (void)!real().read(notify_, &v, sizeof v);
}

// A poll/epoll waiter woke. The notification descriptor is drained however it is
// watched: it is cheap, and a vendor library may poll it level-triggered itself.
void Conn::after_wait(bool /*edge_watched*/) noexcept {
  drain_notifications();
  pass_on_wakeup();
}

void Conn::pass_on_wakeup() noexcept {
  short asleep = 0;
  if (sleepers_[0].load(std::memory_order_seq_cst) > 0) asleep |= POLLIN;
  if (sleepers_[1].load(std::memory_order_seq_cst) > 0) asleep |= POLLOUT;
  if (!asleep || vfd_ < 0 || state() != State::linked) return;
  arm(asleep);
  // A waiter woken for nothing re-arms and sleeps, so this never loops between two
  // waiters unless one of them has what it waits for.
  if (vendor_revents(asleep) & (asleep | POLLHUP | POLLERR)) notify();
}

ssize_t Conn::send(int fd, const iovec* iov, int iovcnt, int flags) {
  std::lock_guard tx(tx_lock_);
  const size_t total = iov_total(iov, iovcnt);
  size_t sent = 0;
  Deadline deadline(SO_SNDTIMEO);
  for (;;) {
    const State st = state();
    if (st == State::broken) return sent ? ssize_t(sent) : -ECONNRESET;
    if (write_shut_) return sent ? ssize_t(sent) : -EPIPE;
    if (!tx_switched_ && !tx_left_ && st == State::linked) {
      send_ack_if_due(fd);
      if (state() == State::broken) continue;
      const wire::StreamHeader h = wire::stream_header(wire::Kind::switch_at, tcp_sent_);
      memcpy(header_out_, &h, sizeof h);
      header_left_ = sizeof h;
      tx_switched_ = true;
      carried_.store(true, std::memory_order_relaxed);
      LOG_DEBUG("fd=%d vendor: sends through %s after %llu bytes on TCP", log_fd_,
                svc_->profile().name.c_str(), static_cast<unsigned long long>(tcp_sent_));
    }
    if (!tx_on_vendor()) {
      iovec rest[64];
      const int rest_n = part_of(iov, iovcnt, sent, SIZE_MAX, rest, 64);
      // Non-blocking while the link may come up: a sender must not sleep on TCP once
      // it could switch. A blocking caller sleeps in wait() below instead.
      const ssize_t n = kernel_send(fd, rest, rest_n, flags | MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        if (!tx_switched_) tcp_sent_ += uint64_t(n);
        sent += size_t(n);
        if (sent == total) return ssize_t(sent);
        continue;
      }
      if (n != -EAGAIN) return sent ? ssize_t(sent) : n;
    } else {
      ssize_t n;
      if (header_left_ > 0) {
        n = api_->send(vfd_, header_out_ + sizeof header_out_ - header_left_, header_left_,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) header_left_ = uint8_t(header_left_ - n);
      } else {
        iovec rest[64];
        const int rest_n = part_of(iov, iovcnt, sent, SIZE_MAX, rest, 64);
        n = vendor_send(rest, rest_n);
        if (n > 0) {
          vendor_sent_ += uint64_t(n);
          sent += size_t(n);
          if (sent == total) return ssize_t(sent);
        }
      }
      if (n < 0 && !would_block(errno)) {
        const int err = errno;
        if (header_left_ == sizeof header_out_) {  // nothing of our stream on the link
          LOG_DEBUG("fd=%d vendor: the switch failed (%s): stays on TCP", log_fd_, strerror(err));
          tx_switched_ = false;
          tx_left_ = true;
          std::lock_guard lock(state_lock_);
          if (state() == State::linked) to_tcp_locked("the vendor connection failed before the switch");
          continue;
        }
        reset(fd, "the vendor connection failed after the switch (bytes may be lost)");
        return sent ? ssize_t(sent) : -ECONNRESET;
      }
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
    }
    if (nonblocking(fd, flags)) {
      if (tx_on_vendor()) watch_for_waiter(POLLOUT);
      return sent ? ssize_t(sent) : -EAGAIN;
    }
    const bool on_vendor = tx_on_vendor();
    if (const int w = wait(fd, on_vendor ? POLLOUT : 0, on_vendor ? 0 : POLLOUT, deadline); w < 0) {
      if (sent) return ssize_t(sent);
      // The kernel restarts a send that an SA_RESTART handler interrupted; our poll() in
      // wait() cannot be restarted by it, so the handlers decide (signal_restart.hpp).
      if (w == -EINTR && interrupted_call_restarts()) continue;
      return w;
    }
  }
}

ssize_t Conn::recv(int fd, const iovec* iov, int iovcnt, int flags) {
  std::lock_guard rx(rx_lock_);
  const bool peek = flags & MSG_PEEK;
  const bool waitall = (flags & MSG_WAITALL) && !peek;
  const size_t total = iov_total(iov, iovcnt);
  if (total == 0) return 0;
  size_t got = 0;
  Deadline deadline(SO_RCVTIMEO);
  for (;;) {
    if (state() == State::broken) return got ? ssize_t(got) : -ECONNRESET;
    take_peer_header(fd);
    iovec rest[64];
    const int rest_n = part_of(iov, iovcnt, got, SIZE_MAX, rest, 64);
    short vendor_wait = 0, tcp_wait = POLLIN;
    if (rx_on_vendor()) {
      iovec part[64];
      const size_t limit = peer_resynced_ ? size_t(peer_vendor_end_ - vendor_received_) : SIZE_MAX;
      const int pn = part_of(rest, rest_n, 0, limit, part, 64);
      ssize_t n = vendor_eof_ ? 0 : vendor_recv(part, pn, peek);
      if (n > 0) {
        if (!peek) vendor_received_ += uint64_t(n);
        got += size_t(n);
        tcp_eof_ns_ = 0;
        if (!waitall || got == total || peek) return ssize_t(got);
        continue;
      }
      if (n < 0 && !would_block(errno)) {
        reset(fd, "the vendor connection failed (bytes may be lost)");
        return got ? ssize_t(got) : -ECONNRESET;
      }
      if (n == 0) vendor_eof_ = true;
      if (read_shut_) return ssize_t(got);  // shutdown(SHUT_RD): nothing waiting, the end
      if (peer_resynced_) {  // the peer said how much the link carries: it must come
        if (vendor_eof_) {
          reset(fd, "the vendor connection ended before the peer's last vendor bytes");
          return got ? ssize_t(got) : -ECONNRESET;
        }
        vendor_wait = POLLIN;
        tcp_wait = 0;
      } else {
        // Nothing on the link: TCP after the peer's switch offset brings its resync
        // frame, its end, or a reset.
        const int r = take_resync_frame(fd);
        if (r == 1) continue;
        if (r == 0) {  // TCP's end: the stream ends once the vendor stream did
          if (vendor_eof_) return ssize_t(got);
          if (!tcp_eof_ns_) tcp_eof_ns_ = now_ns();
          if (now_ns() - tcp_eof_ns_ > kEofGraceNs) {
            reset(fd, "TCP ended but the vendor stream did not");
            return got ? ssize_t(got) : -ECONNRESET;
          }
          tcp_wait = 0;
        } else if (r != -EAGAIN) {
          return got ? ssize_t(got) : r;
        }
        vendor_wait = vendor_eof_ ? 0 : POLLIN;
      }
    } else {
      const bool limited = peer_ == Peer::switched && !rx_left_ && !peer_resynced_;
      iovec part[64];
      const int pn = part_of(rest, rest_n, 0,
                             limited ? size_t(peer_switch_at_ - tcp_received_) : SIZE_MAX, part, 64);
      const ssize_t n = kernel_recv(fd, part, pn, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
      if (n > 0) {
        if (!peek) tcp_received_ += uint64_t(n);
        got += size_t(n);
        if (!waitall || got == total || peek) return ssize_t(got);
        continue;
      }
      if (n == 0) {
        // The peer may have switched just before its end: its header came meanwhile.
        if (peer_ == Peer::unknown && state() == State::linked) {
          take_peer_header(fd);
          if (peer_ == Peer::switched) continue;
        }
        return ssize_t(got);
      }
      if (n != -EAGAIN) return got ? ssize_t(got) : n;
      // The peer's stream header may come on the link meanwhile.
      if (peer_ == Peer::unknown && !rx_left_) vendor_wait = POLLIN;
    }
    if (got && !waitall) return ssize_t(got);
    if (nonblocking(fd, flags)) {
      if (!got && vendor_wait) watch_for_waiter(vendor_wait);
      return got ? ssize_t(got) : -EAGAIN;
    }
    if (const int w = wait(fd, vendor_wait, tcp_wait, deadline); w < 0) {
      if (got) return ssize_t(got);
      if (w == -EINTR && interrupted_call_restarts()) continue;  // as send
      return w;
    }
  }
}

long Conn::bytes_readable(int fd) noexcept {
  std::lock_guard rx(rx_lock_);
  take_peer_header(fd);
  if (rx_on_vendor()) {
    char scratch[65536];
    iovec v{scratch, sizeof scratch};
    const ssize_t n = vendor_recv(&v, 1, true);
    return n > 0 ? long(n) : 0;
  }
  int tcp = 0;
  if (real().ioctl(fd, FIONREAD, &tcp) != 0) return -errno;
  if (peer_ == Peer::switched && !rx_left_ && !peer_resynced_)
    tcp = int(std::min<uint64_t>(uint64_t(tcp), peer_switch_at_ - tcp_received_));
  return tcp;
}

short Conn::poll_now(int fd, short events) noexcept {
  pollfd p{fd, short(events | POLLRDHUP), 0};
  (void)real().poll(&p, 1, 0);
  short rev = short(p.revents & (POLLERR | POLLHUP | POLLNVAL));
  if (state() == State::broken) return short(rev | POLLERR | (events & (POLLIN | POLLOUT)));
  bool on_vendor = false;
  {
    std::unique_lock rx(rx_lock_, std::try_to_lock);  // a receiver takes the header otherwise
    if (rx) {
      take_peer_header(fd);
      on_vendor = rx_on_vendor();
    }
  }
  if (events & (POLLIN | POLLRDNORM | POLLRDHUP)) {
    if (!on_vendor) {
      rev |= short(p.revents & (events & (POLLIN | POLLRDNORM | POLLRDHUP)));
    } else if ((p.revents & (POLLIN | POLLRDHUP)) ||
               (vendor_revents(POLLIN) & (POLLIN | POLLHUP | POLLERR))) {
      // Vendor bytes, or on TCP the peer's resync frame or its end: recv() sorts them.
      rev |= short(events & (POLLIN | POLLRDNORM));
      // The peer's end of TCP is its end of writing: its library ends the vendor stream
      // first. As the kernel does, reported while bytes before it are still unread.
      rev |= short(p.revents & events & POLLRDHUP);
    }
  }
  if (events & (POLLOUT | POLLWRNORM)) {
    if (!tx_on_vendor())
      rev |= short(p.revents & (events & (POLLOUT | POLLWRNORM)));
    else if (vendor_revents(POLLOUT) & POLLOUT)
      rev |= short(events & (POLLOUT | POLLWRNORM));
  }
  return rev;
}

int Conn::wait_fds(int fd, short events, pollfd* out) noexcept {
  short vendor_events = 0;
  if (state() == State::linked) {
    std::unique_lock rx(rx_lock_, std::try_to_lock);
    if ((events & POLLIN) && rx && (peer_ == Peer::unknown || rx_on_vendor()) && !rx_left_)
      vendor_events |= POLLIN;
    if ((events & POLLOUT) && tx_on_vendor()) vendor_events |= POLLOUT;
  }
  waiter_events_.store(arm(vendor_events), std::memory_order_relaxed);
  // TCP's end is news to a reader only: after the peer's half-close TCP stays readable for
  // good and would wake a waiter for room at once, for ever (a busy loop).
  short tcp_events = events;
  if (events & (POLLIN | POLLRDNORM | POLLRDHUP)) tcp_events |= POLLRDHUP;
  // Room on the link is the link's news: TCP, writable all along, would wake a writer
  // waiting for the library's send buffer at once and for ever (a busy loop).
  if (tx_on_vendor()) tcp_events &= short(~(POLLOUT | POLLWRNORM));
  out[0] = pollfd{wake_, POLLIN, 0};
  out[1] = pollfd{fd, tcp_events, 0};
  return 2;
}

int Conn::shutdown(int fd, int how) noexcept {
  if (how == SHUT_WR || how == SHUT_RDWR) {
    std::lock_guard tx(tx_lock_);
    write_shut_ = true;
    // The vendor stream's end goes before TCP's: a receiver takes TCP's end as the end
    // of the stream once the vendor stream ended.
    if (tx_on_vendor()) end_vendor_stream();
  }
  if (how == SHUT_RD || how == SHUT_RDWR) {
    std::lock_guard rx(rx_lock_);
    read_shut_ = true;
  }
  return real().shutdown(fd, how) == 0 ? 0 : -errno;
}

void Conn::end_vendor_stream() noexcept {
  if (svc_->shutdown(vfd_, SHUT_WR, true)) return;
  // TCP's end follows now; the peer's receiver waits for the vendor's end a while
  // (kEofGraceNs), then resets. If this process exits meanwhile, what the library still
  // had to send is lost with it.
  LOG_DEBUG("fd=%d vendor: the library did not finish ending the stream in time (%llu bytes "
            "sent through it); TCP's end goes first",
            log_fd_, static_cast<unsigned long long>(vendor_sent_));
}

void Conn::downgrade(int fd, const char* why) noexcept {
  std::lock_guard rx(rx_lock_);
  take_peer_header(fd);
  if (state() == State::broken) return;
  if (peer_ == Peer::switched && !rx_left_ && !(peer_resynced_ && !rx_on_vendor())) {
    // The peer's bytes on the link are in its library and ours: nobody can resend them.
    char text[sizeof reason_];
    snprintf(text, sizeof text, "%s while the peer's stream was on the vendor link", why);
    return reset(fd, text);
  }
  std::lock_guard tx(tx_lock_);
  if (tx_on_vendor() && !peer_acked_) {
    // The peer may not have read our Switch yet (a library may deliver it after TCP
    // delivers what follows): it would take a resync frame on TCP for data.
    char text[sizeof reason_];
    snprintf(text, sizeof text, "%s before the peer confirmed our switch", why);
    return reset(fd, text);
  }
  rx_left_ = true;
  if (tx_on_vendor()) {
    wire::ResyncFrame f{};
    memcpy(f.magic, wire::kResyncMagic, 4);
    f.version = wire::kVersion;
    wire::put_be(f.vendor_bytes, vendor_sent_, 8);
    // The peer reads it once the vendor stream is drained: it goes whole, blocking.
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&f);
    size_t left = sizeof f;
    while (left > 0 && header_left_ == 0) {
      const ssize_t n = real().send(fd, p + sizeof f - left, left, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      left -= size_t(n);
    }
    if (left > 0) return reset(fd, "cannot leave the vendor link (the resync frame failed)");
    LOG_DEBUG("fd=%d vendor: leaves the link after %llu vendor bytes (%s)", log_fd_,
              static_cast<unsigned long long>(vendor_sent_), why);
  } else if (!tx_switched_ && vfd_ >= 0 && state() == State::linked) {
    (void)send_header(fd, wire::Kind::leave, 0);
  }
  tx_left_ = true;
  std::lock_guard lock(state_lock_);
  if (state() == State::connecting || state() == State::linked) to_tcp_locked(why);
}

void Conn::close() noexcept {
  const bool mine = getpid() == owner_pid_;
  // Stream headers the peer wrote that we never read (its Ack, when only we sent) are read
  // away first: a library over Unix sockets (tv) turns a close with unread bytes into a
  // reset at the peer, which then lost its clean end of stream (seen once, in a CI run of
  // the ASan build). Only when our receiving direction is not on the link: unread data there is
  // the application's, and closing over it resets, as TCP does.
  if (mine && vfd_ >= 0 && state() == State::linked && !rx_on_vendor()) {
    uint8_t scratch[256];
    for (int i = 0; i < 4; ++i)
      if (api_->recv(vfd_, scratch, sizeof scratch, MSG_DONTWAIT) <= 0) break;
  }
  if (mine && vfd_ >= 0 && tx_on_vendor()) end_vendor_stream();
  for (int i = 0; i < service_count_; ++i) services_[i]->forget(this, -1);
  // Linked by a service (before or while the others forgot): the descriptor goes back to
  // it. A forked child leaves the library's descriptors alone: they are the parent's.
  if (svc_) svc_->forget(this, mine ? vfd_ : -1);
}

}  // namespace fastsock::vendors
