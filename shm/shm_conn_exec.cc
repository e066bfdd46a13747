// A connection continuing over exec (src/exec_handover.hpp): the old image hands over what
// the new one cannot read from the segment, the new image rebuilds the connection.
//
// Everything the ring ends, the handoff slots, the switch offsets and the notification need
// is in the segment already (their constructors read an inherited segment as they read a
// fresh one). The token (shm_exec_token.hpp) adds this end's private counters and flags and
// the descriptors.
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
#include "shm_exec_token.hpp"
#include "shm_sys.hpp"

namespace fastsock::shm {

namespace {

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
  const unsigned flags = (tx_switched_ ? kExecSwitched : 0) |
                         (write_shut_ ? kExecWriteShut : 0) | (read_shut_ ? kExecReadShut : 0) |
                         (abortive_close_ ? kExecAbortive : 0);
  const ExecToken token{side_, seg_->fd(), own_bell_, peer_bell_, tcp_sent_, tcp_received_,
                        shm_sent_, flags};
  const int n = at_rest ? format_exec_token(out, cap, token) : 0;
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
  ExecToken t;
  if (!parse_exec_token(token, t)) {
    *why = "malformed handover from the previous program image";
    return -EINVAL;
  }
  if (!is_eventfd(t.own_bell) || !is_eventfd(t.peer_bell)) {
    *why = "the handed-over eventfds are missing";
    return -EBADF;
  }
  own_bell_ = t.own_bell;  // owned from here (closed by the destructor)
  peer_bell_ = t.peer_bell;
  internal_fds::add(own_bell_);
  internal_fds::add(peer_bell_);
  set_cloexec(own_bell_, true);
  set_cloexec(peer_bell_, true);
  set_cloexec(t.memfd, true);
  if (Status st = segment_.attach(t.memfd, Limits{kMinWindow, kMaxWindowLimit}); !st.ok()) {
    *why = st.reason;
    return -st.err;
  }
  keep_memfd_for(fd);
  side_ = t.side;
  tcp_sent_ = t.tcp_sent;
  tcp_received_ = t.tcp_received;
  shm_sent_ = t.shm_sent;
  tx_switched_ = t.flags & kExecSwitched;
  write_shut_ = t.flags & kExecWriteShut;
  read_shut_ = t.flags & kExecReadShut;
  abortive_close_ = t.flags & kExecAbortive;
  tx_ = RingProducer(*seg_, side_, options_.limits.max_window);
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
