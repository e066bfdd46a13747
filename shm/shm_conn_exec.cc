// A connection continuing over exec (src/exec_handover.hpp): the old image hands over what
// the new one cannot read from the segment, the new image rebuilds the connection.
//
// Everything the ring ends, the handoff slots, the switch offsets and the notification need
// is in the segment already (their constructors read an inherited segment as they read a
// fresh one). The token adds this end's private counters and flags and the descriptors:
//
//   <side>,<memfd>,<own eventfd>,<peer eventfd>,<tcp_sent>,<tcp_received>,<shm_sent>,<flags>
//
// flags: 1 this end's switch offset is published, 2 shut for writing, 4 shut for reading,
// 8 SO_LINGER {1, 0} (abortive close).
//
// Only a connection at rest in this sense is handed over; anything else is downgraded by
// the core as before: both directions on shm (no downgrade under way, nothing being resent,
// no leftover bytes), no handoff of ours outstanding (the peer would read the new image's
// memory), no handoff of the peer's half delivered, no typed receive in progress, the peer
// in another process, the memfd still open (see keep_memfd_for).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "internal_fds.hpp"
#include "shm_conn.hpp"
#include "shm_sys.hpp"

namespace fastsock::shm {

namespace {

constexpr unsigned kSwitched = 1, kWriteShut = 2, kReadShut = 4, kAbortive = 8;

void set_cloexec(int fd, bool on) { (void)sys::fcntl(fd, F_SETFD, on ? FD_CLOEXEC : 0); }

bool is_eventfd(int fd) {
  char proc[48], target[32];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(proc, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return strcmp(target, "anon_inode:[eventfd]") == 0;
}

}  // namespace

size_t Conn::exec_handover(char* out, size_t cap) {
  // Other threads hold these only for the length of a call (a sleeper releases them), so a
  // short bounded wait suffices; otherwise the connection is downgraded instead.
  for (int tries = 0;; ++tries) {
    if (std::try_lock(send_lock_, recv_lock_) == -1) break;
    if (tries == 50) return 0;
    const timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
  // A connector that has not looked at the acceptor's answer yet collects it now.
  if (phase_ == Phase::awaiting_peer) (void)check_peer();
  const bool at_rest =
      phase_ == Phase::active && !tx_tcp_ && !rx_tcp_ && !resending_ &&
      leftover_pos_ == leftover_len_ && !peer_bell_missing_ && expect_type_ == 0 &&
      !handoff_out_.outstanding() && !handoff_in_.mid_post() && seg_->fd() >= 0 &&
      !seg_->peer_in_this_process() && own_bell_ >= 0 && peer_bell_ >= 0 && !tx_.corrupt() &&
      !rx_.corrupt();
  const unsigned flags = (tx_switched_ ? kSwitched : 0) | (write_shut_ ? kWriteShut : 0) |
                         (read_shut_ ? kReadShut : 0) | (abortive_close_ ? kAbortive : 0);
  const int n = at_rest ? snprintf(out, cap, "%d,%d,%d,%d,%llu,%llu,%llu,%u", side_, seg_->fd(),
                                   own_bell_, peer_bell_, (unsigned long long)tcp_sent_,
                                   (unsigned long long)tcp_received_,
                                   (unsigned long long)shm_sent_, flags)
                        : 0;
  if (n <= 0 || size_t(n) >= cap) {
    recv_lock_.unlock();
    send_lock_.unlock();
    return 0;
  }
  for (int fd : {seg_->fd(), own_bell_, peer_bell_}) set_cloexec(fd, false);
  exec_held_ = true;
  return size_t(n);
}

void Conn::exec_failed() {
  if (!exec_held_) return;
  for (int fd : {seg_->fd(), own_bell_, peer_bell_}) set_cloexec(fd, true);
  exec_held_ = false;
  recv_lock_.unlock();
  send_lock_.unlock();
}

int Conn::adopt(int fd, const char* token, const char** why) {
  int side, memfd, own, peer;
  unsigned long long tcp_sent, tcp_received, shm_sent;
  unsigned flags;
  char end;
  if (sscanf(token, "%d,%d,%d,%d,%llu,%llu,%llu,%u%c", &side, &memfd, &own, &peer, &tcp_sent,
             &tcp_received, &shm_sent, &flags, &end) != 8 ||
      (side != 0 && side != 1) || memfd < 0 || own < 0 || peer < 0 || own == peer) {
    *why = "malformed handover from the previous program image";
    return -EINVAL;
  }
  if (!is_eventfd(own) || !is_eventfd(peer)) {
    *why = "the handed-over eventfds are missing";
    return -EBADF;
  }
  own_bell_ = own;  // owned from here (closed by the destructor)
  peer_bell_ = peer;
  internal_fds::add(own_bell_);
  internal_fds::add(peer_bell_);
  set_cloexec(own_bell_, true);
  set_cloexec(peer_bell_, true);
  set_cloexec(memfd, true);
  if (Status st = segment_.attach(memfd, options_.limits); !st.ok()) {
    *why = st.reason;
    return -st.err;
  }
  keep_memfd_for(fd);
  side_ = side;
  tcp_sent_ = tcp_sent;
  tcp_received_ = tcp_received;
  shm_sent_ = shm_sent;
  tx_switched_ = flags & kSwitched;
  write_shut_ = flags & kWriteShut;
  read_shut_ = flags & kReadShut;
  abortive_close_ = flags & kAbortive;
  tx_ = RingProducer(*seg_, side_);
  rx_ = RingConsumer(*seg_, side_ ^ 1);
  handoff_out_ = HandoffSender(*seg_, side_);
  handoff_in_ = HandoffReceiver(*seg_, side_ ^ 1);
  tx_control_ = Control(*seg_, side_);
  rx_control_ = Control(*seg_, side_ ^ 1);
  notifier_ = Notifier(*seg_, side_, own_bell_, peer_bell_);
  if (tx_.corrupt() || rx_.corrupt()) {
    *why = "the handed-over segment's rings are inconsistent";
    return -EPROTO;
  }
  phase_ = Phase::active;
  // A peer that slept through the exec re-checks.
  (void)notifier_.data_published();
  (void)notifier_.space_freed();
  return 0;
}

}  // namespace fastsock::shm
