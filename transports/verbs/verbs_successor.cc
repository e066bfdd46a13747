// A pre-forking server whose listening process exits while its children still listen
// (docs/verbs.md, "A listening process that exits"). The RDMA listener dies with the
// process that opened it, and every later connect request would be rejected: the children's
// connections would all stay on TCP. A daemon that listens before it forks and exits does
// exactly that (nginx by default: the master is the listening process's child). So a
// process that inherited a listener (and so its redirect table, shared with its siblings,
// and a descriptor of the owner's bell, which its siblings ring) takes it over once the
// owner has exited: it listens on the RDMA port again, becomes the table's owner, and
// answers its siblings' redirects as the owner did, polling the bell they ring. Two
// children that both find the owner gone agree through the table (pass_owner): one takes
// over, the other watches it.
//
// When: a process that forks (the master forking its workers) checks before the fork; a
// child checks when it accepts on the inherited socket; and while the owner lives, the
// service watches it through a pidfd, so that the takeover happens when it exits, before
// the next connection arrives. A child that never forks and is already blocked in accept
// when the owner exits takes over at its first accept: that one connection stays on TCP.
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "guard.hpp"
#include "internal_fds.hpp"
#include "log.hpp"
#include "real.hpp"
#include "verbs_cm.hpp"

namespace fastsock::verbs {

std::mutex Cm::inherited_lock_;
Cm::Inherited Cm::inherited_[Cm::kMaxInherited];
int Cm::inherited_count_ = 0;

namespace {

// A pidfd of `pid` (close-on-exec, at the library's place); -1 with errno.
int open_pidfd(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  return internal_fds::take(int(syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

bool exited(int pidfd) noexcept {
  pollfd p{pidfd, POLLIN, 0};
  return real().poll(&p, 1, 0) == 1;  // readable once the process has exited
}

}  // namespace

void Cm::inherit_listeners(const Cm& parent) noexcept {
  const pid_t self = getpid();
  for (Listener* l : parent.listeners_) {
    // The parent's own listeners for children, whose socket the child holds (a held one's
    // socket is closed in the parent, so not inherited).
    if (l->owner == self || !l->redirects || l->owner_bell < 0 || l->held) continue;
    bool closing = false;
    for (const Listener* c : parent.closing_) closing |= c == l;
    if (closing || inherited_count_ == kMaxInherited) continue;
    inherited_[inherited_count_++] = Inherited{l, -1, -1, false};
  }
}

void Cm::drop_inherited_locked(int index) noexcept {
  if (inherited_[index].pidfd >= 0) internal_fds::close(inherited_[index].pidfd);
  inherited_[index] = inherited_[--inherited_count_];
}

bool Cm::owner_gone_locked(Inherited& in) noexcept {
  const pid_t owner = in.l->redirects->owner();
  if (in.pidfd >= 0 && in.watched != owner) {  // a sibling took over: watch it instead
    internal_fds::close(in.pidfd);
    in.pidfd = -1;
  }
  if (in.pidfd < 0) {
    in.pidfd = open_pidfd(owner);
    in.watched = owner;
    if (in.pidfd < 0) {
      // ESRCH: gone (and reaped). Without pidfds (before Linux 5.3) a zombie owner counts
      // as alive, and nothing watches: the check at the next fork or accept decides.
      return errno == ESRCH || (kill(owner, 0) != 0 && errno == ESRCH);
    }
    const uint64_t one = 1;  // the service polls the new pidfd from its next round
    (void)!real().write(bell_, &one, sizeof one);
  }
  return exited(in.pidfd);
}

nfds_t Cm::inherited_pidfds_locked(pollfd* out, nfds_t room) noexcept {
  nfds_t n = 0;
  for (int i = 0; i < inherited_count_ && n < room; ++i)
    if (inherited_[i].pidfd >= 0 && !inherited_[i].gave_up)
      out[n++] = pollfd{inherited_[i].pidfd, POLLIN, 0};
  return n;
}

void Cm::check_inherited() noexcept {
  std::lock_guard inherited(inherited_lock_);
  if (inherited_count_ == 0) return;
  Cm* cm = get(nullptr);  // the watches need the service; a takeover, its channel
  if (!cm) return;
  for (int i = 0; i < inherited_count_; ++i) {
    Inherited& in = inherited_[i];
    if (in.gave_up || !cm->owner_gone_locked(in)) continue;
    bool retry = true;
    if (cm->adopt_locked(in.l, in.watched, &retry)) drop_inherited_locked(i--);
    else if (!retry) in.gave_up = true;
  }
}

bool Cm::adopt_locked(Listener* l, pid_t gone, bool* retry) noexcept {
  const pid_t self = getpid();
  if (!l->redirects->pass_owner(gone, self)) return false;  // a sibling was first: watched next
  bool any_address = false;
  const char* why = "";
  rdma_cm_id* id = bind_listener(l->local, &any_address, &why);
  if (!id) {
    (void)l->redirects->pass_owner(self, gone);
    *retry = false;
    LOG_DEBUG("verbs: the listening process %d of port %u has exited; its RDMA listener cannot "
              "be taken over here (%s): the connections accepted on the socket stay on TCP",
              int(gone), unsigned(l->local.port), why);
    return false;
  }
  {
    std::lock_guard lock(lock_);
    const char* diag_why = "";
    l->cm = this;
    l->id = id;
    l->owner = self;
    l->any_address = any_address;
    l->for_children = true;
    l->adopted = true;
    l->held = false;
    l->linger_until_ns = 0;
    // As at the owner's first fork: the lookup tells later whether the socket still
    // listens somewhere once this process closes it (Listener::held).
    l->diag_finds = l->tcp_cookie && diag_.still_listening(l->local, l->tcp_cookie, &diag_why) == 1;
    try {
      listeners_.push_back(l);
    } catch (...) {
      l->id = nullptr;
      l->owner = gone;
      l->adopted = false;
      (void)l->redirects->pass_owner(self, gone);
      *retry = false;
      ReentryGuard guard;
      lib_->rdma_destroy_id(id);
      return false;
    }
  }
  const uint64_t one = 1;  // the service polls the adopted bell from its next round
  (void)!real().write(bell_, &one, sizeof one);
  LOG_DEBUG("verbs: the listening process %d of port %u has exited: its RDMA listener is "
            "taken over here, for the connections its children accept", int(gone),
            unsigned(l->local.port));
  return true;
}

}  // namespace fastsock::verbs
