#include "poll_merge.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "cancel_point.hpp"
#include "config_load.hpp"
#include "fd_table.hpp"
#include "link_io.hpp"
#include "real.hpp"
#include "transport.hpp"
#include "user_io.hpp"

namespace fastsock::ops {

namespace {

constexpr short kAlways = POLLERR | POLLHUP | POLLNVAL;  // reported even when not asked

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Per call: the user-link connections of the set, and the array handed to the kernel
// (the set's own entries first, in order, then the links' wake descriptors).
struct Scratch {
  std::unique_ptr<Socket*[], FreeDeleter> users;   // per entry: its Socket if user-link
  std::unique_ptr<pollfd[], FreeDeleter> kernel;
  bool allocate(nfds_t n) {
    users.reset(static_cast<Socket**>(std::calloc(n, sizeof(Socket*))));
    kernel.reset(static_cast<pollfd*>(
        std::calloc(n * (1 + Transport::kMaxWaitFds), sizeof(pollfd))));
    return users && kernel;
  }
};

using link_io::now_ns;
using link_io::SpinBudget;

// Asks every user-link entry for its readiness now; returns how many have events.
int user_readiness(pollfd* fds, nfds_t n, Socket* const* users) {
  int ready = 0;
  for (nfds_t i = 0; i < n; ++i) {
    if (!users[i]) continue;
    Socket& s = *users[i];
    const short want = short(fds[i].events | kAlways);
    fds[i].revents = short(s.link->poll_now(s, fds[i].fd, fds[i].events) & want);
    if (fds[i].revents) ++ready;
  }
  return ready;
}

// The earliest time a link's answer may change without a wake descriptor firing
// (Transport::recheck_at), not before 1 ms from now, or `deadline` if that comes first (-1:
// neither).
int64_t wake_at(const pollfd* fds, nfds_t n, Socket* const* users, int64_t deadline) {
  int64_t at = deadline;
  for (nfds_t i = 0; i < n; ++i) {
    if (!users[i]) continue;
    const int64_t t = users[i]->link->recheck_at(*users[i], fds[i].events);
    if (t <= 0) continue;
    // Clamped before the comparison, so that the caller's own deadline is never overshot.
    const int64_t when = std::max(t, now_ns() + 1'000'000);
    if (at < 0 || when < at) at = when;
  }
  return at;
}

// The kernel's answer for the set's own (non-user) entries, copied back.
int copy_kernel_revents(pollfd* fds, nfds_t n, Socket* const* users, const pollfd* k) {
  int ready = 0;
  for (nfds_t i = 0; i < n; ++i) {
    if (users[i]) continue;
    fds[i].revents = k[i].revents;
    if (k[i].revents) ++ready;
  }
  return ready;
}

}  // namespace

bool has_user_link(const pollfd* fds, nfds_t n) {
  for (nfds_t i = 0; i < n; ++i) {
    if (!fd_table::maybe_tracked(fds[i].fd)) continue;
    SocketRef s = fd_table::lookup(fds[i].fd);
    if (s && user_link(*s)) return true;
  }
  return false;
}

FASTSOCK_CANCELLATION_POINT
long poll_merged(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  Scratch scratch;
  if (!scratch.allocate(n)) return -ENOMEM;
  Socket** users = scratch.users.get();
  pollfd* k = scratch.kernel.get();
  // Hold a reference on each user-link Socket for the whole call: another thread may close
  // the descriptor meanwhile (the kernel then reports POLLNVAL for it, as it would).
  for (nfds_t i = 0; i < n; ++i) {
    SocketRef s = fd_table::lookup(fds[i].fd);
    if (s && user_link(*s)) users[i] = s.leak();
  }
  struct Release {
    Socket** users;
    nfds_t n;
    ~Release() {
      for (nfds_t i = 0; i < n; ++i)
        if (users[i]) SocketRef(users[i]).reset();
    }
  } release{users, n};

  const int64_t deadline =
      timeout ? now_ns() + timeout->tv_sec * 1'000'000'000 + timeout->tv_nsec : -1;
  SpinBudget spin(config().spin_us, timeout);
  bool yield = false;  // a peer waits on this CPU: spinning would keep it from answering
  for (nfds_t i = 0; i < n && !yield; ++i)
    if (users[i]) yield = users[i]->link->peer_shares_cpu(*users[i]);
  for (;;) {
    // The set's kernel entries, asked without waiting, and the links' readiness.
    for (nfds_t i = 0; i < n; ++i) k[i] = pollfd{users[i] ? -1 : fds[i].fd, fds[i].events, 0};
    int ready = user_readiness(fds, n, users);
    const timespec zero{0, 0};
    int kernel_ready = real().ppoll(k, n, &zero, mask);
    if (kernel_ready < 0) return -errno;
    ready += copy_kernel_revents(fds, n, users, k);
    if (ready > 0) return ready;
    if (spin.more()) {  // busy-wait within the spin budget: no sleep, no wake-up
      if (yield) sched_yield();
      continue;
    }
    if (deadline >= 0 && now_ns() >= deadline) return 0;

    // Sleep: arm every link, add its wake descriptors, check once more (an event between
    // the check above and arming would otherwise be missed), then let the kernel wait.
    nfds_t total = n;
    for (nfds_t i = 0; i < n; ++i)
      if (users[i])
        total += nfds_t(users[i]->link->wait_fds(*users[i], fds[i].fd, fds[i].events, k + total));
    ready = user_readiness(fds, n, users);
    if (ready == 0) {
      const int64_t until = wake_at(fds, n, users, deadline);
      timespec left;
      if (until >= 0) {
        const int64_t ns = std::max<int64_t>(until - now_ns(), 0);
        left = timespec{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
      }
      kernel_ready = real().ppoll(k, total, until >= 0 ? &left : nullptr, mask);
    }
    const int err = errno;
    for (nfds_t i = 0; i < n; ++i)
      if (users[i]) users[i]->link->disarm(*users[i], Transport::WakeWatch::level);
    if (ready > 0) return ready;
    if (kernel_ready < 0) return -err;  // EINTR: a signal, as the kernel's poll reports it
    // Woken (or timed out): the loop re-asks everyone without waiting.
  }
}

}  // namespace fastsock::ops
