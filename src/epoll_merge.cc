#include "epoll_merge.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>

#include "cancel_point.hpp"
#include "config_load.hpp"
#include "fd_table.hpp"
#include "guard.hpp"
#include "internal_fds.hpp"
#include "link_io.hpp"
#include "log.hpp"
#include "process.hpp"
#include "ptr_set.hpp"
#include "real.hpp"
#include "transport.hpp"
#include "user_io.hpp"

namespace fastsock::epoll_merge {

namespace {

struct EpollSet;

// One user-link connection in one epoll set, as the application registered it.
struct Registration {
  EpollSet* set = nullptr;
  Socket* socket = nullptr;        // not owning: forget_socket() runs before it goes away
  int fd = -1;                     // the descriptor the application registered
  uint32_t events = 0;             // as asked: EPOLLIN, EPOLLOUT, ..., EPOLLET, EPOLLONESHOT
  epoll_data_t data{};
  bool disabled = false;           // EPOLLONESHOT reported; until EPOLL_CTL_MOD
  bool dormant = false;            // EPOLL_CTL_DEL'd by the application: see remove()
  bool on_ready_list = false;
  // Made before a fork, seen in the child: its kernel entries are in a set the parent
  // shares, where they are the parent's too (forget_socket leaves them).
  bool inherited = false;
  // Gone for the application, its kernel entries left (inherited ones, or its set closed
  // while a wait holds it): kept, still a member, so that an event carrying its tag is
  // recognised and dropped instead of handed to the application as its own data (bury).
  bool dead = false;
  uint64_t reported_in = 0;        // the wait call that last reported it
  int wake[Transport::kMaxWaitFds] = {};
  uint32_t wake_events[Transport::kMaxWaitFds] = {};  // as registered in the kernel set
  int wake_count = 0;
  Registration* next_of_socket = nullptr;
  Registration* next_ready = nullptr;
  Registration* next_in_set = nullptr;
  Registration** prev_in_set = nullptr;  // where the pointer to it lives
};

struct EpollSet {
  std::mutex lock;                 // see "Locks" below
  int epfd = -1;                   // the application's number: how the set is found
  // The library's own descriptor of the set (a dup, internal): its kernel calls and waits
  // use it, never the application's number, which another thread may close and the kernel
  // hand out again meanwhile. Closed with the set's last reference, so a wait that holds
  // the set keeps the kernel's set alive until it ends, as a kernel wait does.
  int kernel_fd = -1;
  Registration* dead = nullptr;    // buried registrations (Registration::dead), freed with the set
  int bell = -1;                   // eventfd, readable while the ready list is not empty
  bool bell_rung = false;
  Registration* all = nullptr;     // every registration of the set
  PtrSet members;                  // the same, to recognise our tags in kernel events
  Registration* ready = nullptr;
  EpollSet* next = nullptr;
  uint64_t wait_calls = 0;         // epoll_wait calls on the set (Registration::reported_in)
  // One for its place in g_sets, one per wait holding it (SetUse): freed by the last.
  std::atomic<int> refs{1};
  bool closed = false;             // its descriptor was closed (under the set's lock)
};

// Locks. g_lock guards which sets exist (g_sets, the nestings) and each
// connection's list of registrations (socket_regs); a set's own lock guards the state of
// its registrations, its ready list and its bell. Both are held for bookkeeping only, never
// across a wait; the order is g_lock, then a set's lock. epoll_wait takes g_lock only to
// find its set (letting it go takes none), so threads that each wait on a set of their own
// (an event loop per thread) do not contend while they spin: with one lock for all, wrk's
// two threads made 85,000-160,000 futex calls in 3 s over shm, 1,800-3,200 with a lock
// per set (bench/results/epoll-threads.txt).
std::mutex g_lock;

EpollSet* g_sets = nullptr;
std::atomic<int> g_set_count{0};  // sets that held a user-link connection: 0 = all go to the kernel
std::atomic<int> g_rung_bells{0};  // sets whose bell is rung: 0 = nothing to refresh

// A set of ours registered in another epoll set (EPOLL_CTL_ADD of its descriptor there),
// by descriptor numbers: a wait on the outer set re-checks the inner one first.
struct Nesting {
  int outer;
  int inner;
  Nesting* next;
};
Nesting* g_nestings = nullptr;
std::atomic<int> g_nesting_count{0};

bool hand_over(Registration& r, int k);
int handable(const Registration& r);

// Before a fork (both locks held): the connections fork moved to TCP for good leave the
// set to the kernel now (hand_to_kernel), so that parent and child, which share the
// kernel's set from then on, get the application's data and events as without the
// library. Left to the library, a wait in one process would take the other's
// edge-triggered wake-up, and a child that closed its copy of the connection would be
// given the library's tag (preload_fork_epoll).
void hand_settled_to_kernel(EpollSet& set) {
  for (Registration* r = set.all; r;) {
    Registration* next = r->next_in_set;
    if (const int k = handable(*r); k >= 0) (void)hand_over(*r, k);
    r = next;
  }
}

// Every lock is taken before fork, so the child finds none held by a thread it lacks. (A
// set closed while a wait held it is no longer listed; the child never reaches it.)
void fork_prepare() noexcept {
  g_lock.lock();
  for (EpollSet* set = g_sets; set; set = set->next) {
    set->lock.lock();
    hand_settled_to_kernel(*set);
  }
}
void fork_release() noexcept {
  for (EpollSet* set = g_sets; set; set = set->next) set->lock.unlock();
  g_lock.unlock();
}
void fork_child() noexcept {
  for (EpollSet* set = g_sets; set; set = set->next)
    for (Registration* r = set->all; r; r = r->next_in_set) r->inherited = true;
  fork_release();
}
const bool g_registered =
    (register_fork_handlers(ForkHandlers{fork_prepare, fork_release, fork_child}), true);

constexpr uint32_t kStateEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLERR | EPOLLHUP;

// The only flags the kernel accepts together with EPOLLEXCLUSIVE (fs/eventpoll.c,
// EPOLLEXCLUSIVE_OK_BITS).
constexpr uint32_t kExclusiveBits =
    EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE;

Registration*& socket_regs(Socket& s) {
  return reinterpret_cast<Registration*&>(s.epoll_regs);
}

EpollSet* find_set(int epfd) {
  for (EpollSet* set = g_sets; set; set = set->next)
    if (set->epfd == epfd) return set;
  return nullptr;
}

EpollSet* find_or_create_set(int epfd) {
  if (EpollSet* set = find_set(epfd)) return set;
  auto* set = new (std::nothrow) EpollSet;
  if (!set) return nullptr;
  set->epfd = epfd;
  set->kernel_fd = internal_fds::dup(epfd);
  set->bell = internal_fds::take(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = set;
  if (set->kernel_fd < 0 || set->bell < 0 ||
      real().epoll_ctl(set->kernel_fd, EPOLL_CTL_ADD, set->bell, &ev) != 0) {
    if (set->bell >= 0) internal_fds::close(set->bell);
    if (set->kernel_fd >= 0) internal_fds::close(set->kernel_fd);
    delete set;
    return nullptr;
  }
  set->next = g_sets;
  g_sets = set;
  g_set_count.fetch_add(1, std::memory_order_relaxed);
  return set;
}

void unref_set(EpollSet* set) {
  if (set->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  while (Registration* r = set->dead) {
    set->dead = r->next_in_set;
    delete r;
  }
  if (set->kernel_fd >= 0) internal_fds::close(set->kernel_fd);
  delete set;
}

// A registration that leaves the set while kernel entries with its tag may stay in the
// kernel's set (see Registration::dead); off every list but the set's members.
void bury(EpollSet& set, Registration& r) {
  r.dead = true;
  r.socket = nullptr;
  r.next_in_set = set.dead;
  r.prev_in_set = nullptr;
  set.dead = &r;
}

// The set's descriptor was closed (g_lock and the set's lock held): it leaves the list. The
// caller then drops the list's reference (unref_set), once the set's lock is released: the
// set is freed then, or by the last wait that still holds it (SetUse).
void close_set(EpollSet* set) {
  for (EpollSet** p = &g_sets; *p; p = &(*p)->next)
    if (*p == set) { *p = set->next; break; }
  internal_fds::close(set->bell);
  set->bell = -1;
  if (set->bell_rung) g_rung_bells.fetch_sub(1, std::memory_order_relaxed);
  set->bell_rung = false;
  set->closed = true;
  g_set_count.fetch_sub(1, std::memory_order_relaxed);
}

// A wait's hold on its set (found under g_lock, where the list's reference keeps it): the
// set outlives the wait, even when the application closes its descriptor meanwhile from
// another thread. Letting it go takes no lock.
class SetUse {
 public:
  explicit SetUse(int epfd) {
    std::lock_guard lock(g_lock);
    set_ = find_set(epfd);
    if (set_) set_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  ~SetUse() {
    if (set_) unref_set(set_);
  }
  SetUse(const SetUse&) = delete;
  SetUse& operator=(const SetUse&) = delete;
  EpollSet* get() const { return set_; }

 private:
  EpollSet* set_;
};

// The set's own readiness follows its ready list (for poll() or an outer epoll on it).
void update_bell(EpollSet& set) {
  const bool want = set.ready != nullptr;
  if (want == set.bell_rung) return;
  uint64_t v = 1;
  if (want)
    (void)!real().write(set.bell, &v, sizeof v);
  else
    (void)!real().read(set.bell, &v, sizeof v);
  set.bell_rung = want;
  g_rung_bells.fetch_add(want ? 1 : -1, std::memory_order_relaxed);
}

// poll()'s view of the link mapped to epoll's bits (they are the same values on Linux).
uint32_t readiness(Registration& r) {
  Socket& s = *r.socket;
  const short asked = short(r.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
  const uint32_t now = uint32_t(uint16_t(s.link->poll_now(s, r.fd, asked)));
  return now & ((r.events & kStateEvents) | EPOLLERR | EPOLLHUP);
}

// Transport::recheck_at for what the registration asks.
int64_t recheck_at(Registration& r) {
  Socket& s = *r.socket;
  return s.link->recheck_at(s, short(r.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI)));
}

void push_ready(Registration& r) {
  if (r.on_ready_list) return;
  r.on_ready_list = true;
  r.next_ready = r.set->ready;
  r.set->ready = &r;
}

void drop_from_ready(Registration& r) {
  if (!r.on_ready_list) return;
  for (Registration** p = &r.set->ready; *p; p = &(*p)->next_ready)
    if (*p == &r) { *p = r.next_ready; break; }
  r.on_ready_list = false;
}

// After the link's wake descriptors changed (rewatch): the ones it no longer names leave
// the kernel set (a pooled eventfd given back, a rendezvous channel kept for another
// connection: either would wake this registration for nothing).
void drop_stale_wakes(Registration& r, const pollfd* w, int n) {
  for (int k = 0; k < r.wake_count;) {
    int i = 0;
    while (i < n && w[i].fd != r.wake[k]) ++i;
    if (i < n) { ++k; continue; }
    (void)real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_DEL, r.wake[k], nullptr);
    --r.wake_count;
    r.wake[k] = r.wake[r.wake_count];
    r.wake_events[k] = r.wake_events[r.wake_count];
  }
}

// (Re-)arms the link and registers its wake descriptors in the kernel set, edge-triggered:
// the kernel tells us something changed, the link says what is ready now. Before arming,
// the link consumes the wake-ups already delivered (Transport::disarm): a peer signals
// only a waiter that has taken its previous signal. A wake descriptor is watched for
// POLLOUT only while the link asks (TCP, while a direction's bytes still go there): the
// registration follows the link's answer at every arming, as the direction moves.
int arm(Registration& r, bool add_to_kernel, bool add_new = false) {
  Socket& s = *r.socket;
  const short asked = short(r.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
  s.link->disarm(s, Transport::WakeWatch::edge);
  pollfd w[Transport::kMaxWaitFds];
  const int n = s.link->wait_fds(s, r.fd, asked, w);
  if (add_to_kernel) r.wake_count = 0;
  if (add_new) drop_stale_wakes(r, w, n);
  for (int i = 0; i < n; ++i) {
    epoll_event ev{};
    if (r.events & EPOLLEXCLUSIVE) {
      // The kernel takes only kExclusiveBits with EPOLLEXCLUSIVE (no EPOLLRDHUP: a peer's
      // end makes the socket readable anyway) and never lets the registration change, so
      // it watches for room from the start if the application asked for it.
      ev.events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE | (r.events & EPOLLOUT);
    } else {
      ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET | ((w[i].events & POLLOUT) ? uint32_t(EPOLLOUT) : 0);
    }
    ev.data.ptr = &r;
    int k = 0;
    while (k < r.wake_count && r.wake[k] != w[i].fd) ++k;
    if (k < r.wake_count) {
      // EPOLLEXCLUSIVE registrations cannot be modified (the kernel says EINVAL).
      if (r.wake_events[k] == ev.events || (r.events & EPOLLEXCLUSIVE)) continue;
      if (real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_MOD, w[i].fd, &ev) == 0) r.wake_events[k] = ev.events;
      continue;
    }
    // Shared with another registration of this connection, unless the link's wake
    // descriptors changed (rewatch).
    if ((!add_to_kernel && !add_new) || r.wake_count == Transport::kMaxWaitFds) continue;
    int added = real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_ADD, w[i].fd, &ev);
    if (added != 0 && errno == EINVAL && (ev.events & EPOLLEXCLUSIVE)) {
      // The link's wake descriptor is itself an epoll set (verbs, vendor), which the kernel
      // never watches exclusively. Waking every waiter is within EPOLLEXCLUSIVE's promise
      // ("one or more").
      ev.events &= ~uint32_t(EPOLLEXCLUSIVE);
      added = real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_ADD, w[i].fd, &ev);
    }
    if (added != 0) {
      if (errno == EEXIST) continue;  // shared with another registration of this connection
      return -errno;
    }
    r.wake[r.wake_count] = w[i].fd;
    r.wake_events[r.wake_count++] = ev.events;
  }
  return 0;
}

void unlink_from_socket(Registration& r) {
  for (Registration** p = &socket_regs(*r.socket); *p; p = &(*p)->next_of_socket)
    if (*p == &r) { *p = r.next_of_socket; break; }
}

void unregister(Registration& r, bool kernel_too = true) {
  for (int i = 0; kernel_too && i < r.wake_count; ++i)
    (void)real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_DEL, r.wake[i], nullptr);
  drop_from_ready(r);
  unlink_from_socket(r);
  EpollSet* set = r.set;
  *r.prev_in_set = r.next_in_set;
  if (r.next_in_set) r.next_in_set->prev_in_set = r.prev_in_set;
  update_bell(*set);
  if (!kernel_too) {
    bury(*set, r);
    return;
  }
  set->members.erase(&r);
  delete &r;
  // An empty set stays (until its descriptor closes, forget_sets): a program that removes
  // its last connection and adds the next for every request (redis-benchmark) would
  // otherwise pay for a new bell each time.
}

// A connection on TCP for good (its link gave the data back to the kernel: Socket::user_io
// is off) needs nothing of ours any more: its registration becomes the kernel's own, with
// the application's events and data, and its other wake descriptors leave. Otherwise each
// of its readiness checks costs a poll() (a pre-fork server's clients without the library:
// every connection, shm's late attach). Set lock held; not done when the process-wide lock
// is busy (its next event tries again) or the registration cannot be handed over as it is
// (EPOLLEXCLUSIVE ones cannot be modified; a one-shot one already reported, dormant ones).
// Frees `r` when it did.
bool hand_to_kernel(Registration& r) {
  const int k = handable(r);
  if (k < 0) return false;
  std::unique_lock lock(g_lock, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  return hand_over(r, k);
}

// Whether `r` can be handed to the kernel as it is: the index of its socket among its wake
// descriptors, else -1.
int handable(const Registration& r) {
  if (ops::user_link(*r.socket) || r.dormant || r.disabled || (r.events & EPOLLEXCLUSIVE))
    return -1;
  int k = 0;
  while (k < r.wake_count && r.wake[k] != r.fd) ++k;
  return k < r.wake_count ? k : -1;
}

// Both locks held. Frees `r` when it succeeded.
bool hand_over(Registration& r, int k) {
  epoll_event ev{};
  ev.events = r.events;
  ev.data = r.data;
  if (real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_MOD, r.fd, &ev) != 0) return false;
  for (int i = 0; i < r.wake_count; ++i)
    if (i != k) (void)real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_DEL, r.wake[i], nullptr);
  r.wake_count = 0;  // (the socket stays, now the application's)
  LOG_DEBUG("fd=%d on TCP for good: epoll set %d watches it directly", r.fd, r.set->epfd);
  unregister(r);
  return true;
}

// The connection's registration in the set, dormant or not.
Registration* find_in_set(Socket& s, int epfd) {
  for (Registration* r = socket_regs(s); r; r = r->next_of_socket)
    if (r->set->epfd == epfd) return r;
  return nullptr;
}

// The registration the application made for `fd` (not one it removed).
Registration* find_registration(Socket& s, int epfd, int fd) {
  for (Registration* r = socket_regs(s); r; r = r->next_of_socket)
    if (r->set->epfd == epfd && r->fd == fd && !r->dormant) return r;
  return nullptr;
}

// EPOLL_CTL_DEL. A connection's only registration in the set goes dormant instead of
// away: its wake descriptors stay in the kernel set, so that an application that removes
// a connection and adds it back for every request (redis-benchmark; event loops that drop
// a descriptor whose interest became empty) pays no system call for either. Whatever
// wakes a dormant registration is not reported, and stops it being watched (unwatch): a
// connection moved to another set costs this one a single spurious wake-up at most.
void remove(Registration& r) {
  for (Registration* o = socket_regs(*r.socket); o; o = o->next_of_socket)
    if (o != &r && o->set == r.set) {
      unregister(r);  // another registration of the connection shares its wake descriptors
      return;
    }
  drop_from_ready(r);
  r.dormant = true;
  update_bell(*r.set);
}

void unwatch(Registration& r) {
  for (int i = 0; i < r.wake_count; ++i)
    (void)real().epoll_ctl(r.set->kernel_fd, EPOLL_CTL_DEL, r.wake[i], nullptr);
  r.wake_count = 0;
}

// EPOLL_CTL_ADD of a connection whose registration for the same descriptor is dormant.
long revive(Registration& r, const epoll_event& ev) {
  r.dormant = false;
  r.disabled = false;
  r.events = ev.events;
  r.data = ev.data;
  if (long rc = arm(r, r.wake_count == 0); rc < 0) {
    unregister(r);
    return rc;
  }
  if (readiness(r)) push_ready(r);
  update_bell(*r.set);
  return 0;
}

// A registration is identified by its address. The application's own kernel events carry
// its own data, which could hold any value, so a value is only ours if the set knows it.
Registration* our_registration(EpollSet& set, void* tag) {
  return set.members.contains(tag) ? static_cast<Registration*>(tag) : nullptr;
}

long add(EpollSet& set, Socket& s, int fd, const epoll_event& ev) {
  if (find_registration(s, set.epfd, fd)) return -EEXIST;
  auto* r = new (std::nothrow) Registration;
  if (!r) return -ENOMEM;
  r->set = &set;
  r->socket = &s;
  r->fd = fd;
  r->events = ev.events;
  r->data = ev.data;
  if (!set.members.insert(r)) {
    delete r;
    return -ENOMEM;
  }
  r->next_in_set = set.all;
  if (set.all) set.all->prev_in_set = &r->next_in_set;
  r->prev_in_set = &set.all;
  set.all = r;
  r->next_of_socket = socket_regs(s);
  socket_regs(s) = r;
  if (long rc = arm(*r, true); rc < 0) {
    unregister(*r);
    return rc;
  }
  // The kernel reports a descriptor that is ready when added; so do we.
  if (readiness(*r)) push_ready(*r);
  update_bell(set);
  return 0;
}

// The earliest time a connection of the set may become ready without a wake descriptor
// firing (Transport::recheck_at), or -1. The walk covers the whole set, so it happens only
// while some connection of the process may answer (Transport::timed_waits): rarely.
int64_t earliest_recheck(EpollSet& set) {
  if (Transport::timed_waits.load(std::memory_order_relaxed) <= 0) return -1;
  std::lock_guard lock(set.lock);
  int64_t at = -1;
  for (Registration* r = set.all; r; r = r->next_in_set) {
    const int64_t t = r->disabled || r->dormant ? 0 : recheck_at(*r);
    if (t > 0 && (at < 0 || t < at)) at = t;
  }
  return at;
}

// Whether a connection of the set has its peer waiting on this thread's CPU: spinning
// would keep that peer from answering, so the spin yields the CPU (as poll()'s does).
bool peer_on_this_cpu(EpollSet& set) {
  std::lock_guard lock(set.lock);
  for (Registration* r = set.all; r; r = r->next_in_set)
    if (!r->dormant && r->socket->link->peer_shares_cpu(*r->socket)) return true;
  return false;
}

// Woken for such a time: the connections whose time has come go on the ready list, whose
// walk asks them again.
void list_rechecks_due(EpollSet& set) {
  std::lock_guard lock(set.lock);
  if (set.closed) return;
  const int64_t now = link_io::now_ns();
  for (Registration* r = set.all; r; r = r->next_in_set) {
    const int64_t t = r->disabled || r->dormant ? 0 : recheck_at(*r);
    if (t > 0 && t <= now) push_ready(*r);
  }
  update_bell(set);
}

// Brings the set's ready list, and so its bell, up to date without reporting anything.
void refresh_set(EpollSet& set) {
  for (Registration** p = &set.ready; *p;) {
    Registration& r = **p;
    // As a wait does: a connection leaves the list only after it is armed and looked at
    // once more, so that a change between the looks wakes its waiters.
    if (!r.disabled && (readiness(r) || ((void)arm(r, false), readiness(r)))) {
      p = &r.next_ready;
      continue;
    }
    *p = r.next_ready;
    r.on_ready_list = false;
  }
  update_bell(set);
}

// g_lock held. Never waits for the set's lock (see refresh): a set being waited on or
// changed right now has its bell brought up to date by that call.
void refresh_if_rung(EpollSet* set) {
  if (!set) return;
  std::unique_lock lock(set->lock, std::try_to_lock);
  if (lock && set->bell_rung) refresh_set(*set);
}

void refresh_inner_sets(int outer) {
  if (g_nesting_count.load(std::memory_order_relaxed) == 0) return;
  for (Nesting* n = g_nestings; n; n = n->next)
    if (n->outer == outer) refresh_if_rung(find_set(n->inner));
}

// The set with this descriptor, if it is one of ours, and the sets of ours it holds.
void refresh_fd(int fd) {
  refresh_if_rung(find_set(fd));
  refresh_inner_sets(fd);
}

template <class F>
void refresh(F&& body) noexcept {
  if (g_rung_bells.load(std::memory_order_relaxed) == 0) return;
  // Not for the library's own calls (a vendor library's poll inside a link's operation
  // must not re-enter the links), and never waiting for the lock: its holder only does
  // bookkeeping, and this may run in a signal handler that interrupted it. A bell left
  // stale is a spurious wake-up, not a lost one.
  if (inside_library()) return;
  std::unique_lock lock(g_lock, std::try_to_lock);
  if (lock) body();
}

void note_nesting(int outer, int op, int inner) {
  std::lock_guard lock(g_lock);
  Nesting** p = &g_nestings;
  while (*p && !((*p)->outer == outer && (*p)->inner == inner)) p = &(*p)->next;
  if (op == EPOLL_CTL_DEL && *p) {
    Nesting* gone = *p;
    *p = gone->next;
    delete gone;
    g_nesting_count.fetch_sub(1, std::memory_order_relaxed);
  } else if (op == EPOLL_CTL_ADD && !*p && find_set(inner)) {
    if (auto* n = new (std::nothrow) Nesting{outer, inner, g_nestings}) {
      g_nestings = n;
      g_nesting_count.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace

bool ctl(int epfd, int op, int fd, epoll_event* event, long* rc) {
  if ((op == EPOLL_CTL_ADD && g_set_count.load(std::memory_order_relaxed) > 0) ||
      (op == EPOLL_CTL_DEL && g_nesting_count.load(std::memory_order_relaxed) > 0))
    note_nesting(epfd, op, fd);
  if (op != EPOLL_CTL_ADD && g_set_count.load(std::memory_order_relaxed) == 0) return false;
  if (!fd_table::maybe_tracked(fd)) return false;
  SocketRef s = fd_table::lookup(fd);
  if (!s) return false;
  std::lock_guard lock(g_lock);
  Registration* r = find_registration(*s, epfd, fd);
  Registration* d = r ? nullptr : find_in_set(*s, epfd);
  // The set's own lock too, for all that follows (a set made by the ADD below is locked
  // when made).
  std::unique_lock<std::mutex> set_lock;
  if (EpollSet* set = r ? r->set : d ? d->set : find_set(epfd))
    set_lock = std::unique_lock(set->lock);
  if (d && d->dormant) {
    // Removed by the application: the kernel would not know the descriptor either.
    if (op != EPOLL_CTL_ADD) {
      *rc = -ENOENT;
      return true;
    }
    if (d->fd == fd && ops::user_link(*s) && event && !(event->events & EPOLLEXCLUSIVE) &&
        !(d->events & EPOLLEXCLUSIVE)) {
      *rc = revive(*d, *event);
      return true;
    }
    unregister(*d);  // a fresh registration follows (or the kernel's own)
  }
  if (!r && !(op == EPOLL_CTL_ADD && ops::user_link(*s))) return false;
  if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !event) {
    *rc = -EFAULT;
    return true;
  }
  switch (op) {
    case EPOLL_CTL_ADD: {
      if (r) { *rc = -EEXIST; return true; }
      // The kernel's own checks (bad epfd, not an epoll fd, fd == epfd) come first, unless
      // the set is ours already (then epfd is an epoll set, and not this socket).
      epoll_event probe{};
      if (!find_set(epfd) && real().epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &probe) != 0 &&
          errno != ENOENT) {
        *rc = -errno;
        return true;
      }
      if ((event->events & EPOLLEXCLUSIVE) && (event->events & ~kExclusiveBits)) {
        *rc = -EINVAL;  // as the kernel says (e.g. EPOLLEXCLUSIVE with EPOLLONESHOT)
        return true;
      }
      EpollSet* set = find_or_create_set(epfd);
      if (set && !set_lock.owns_lock()) set_lock = std::unique_lock(set->lock);
      *rc = set ? add(*set, *s, fd, *event) : -ENOMEM;
      return true;
    }
    case EPOLL_CTL_MOD:
      if (r->events & EPOLLEXCLUSIVE) { *rc = -EINVAL; return true; }  // as the kernel says
      r->events = event->events;
      r->data = event->data;
      r->disabled = false;
      drop_from_ready(*r);
      (void)arm(*r, false);
      if (readiness(*r)) push_ready(*r);
      update_bell(*r->set);
      *rc = 0;
      return true;
    case EPOLL_CTL_DEL:
      remove(*r);
      *rc = 0;
      return true;
    default:
      *rc = -EINVAL;
      return true;
  }
}

void refresh_polled(const pollfd* fds, nfds_t n) noexcept {
  refresh([&] {
    for (nfds_t i = 0; i < n; ++i)
      if (fds[i].fd >= 0) refresh_fd(fds[i].fd);
  });
}

void refresh_selected(int n, const fd_set* readable) noexcept {
  if (!readable || n <= 0 || n > FD_SETSIZE) return;
  refresh([&] {
    for (int fd = 0; fd < n; ++fd)
      if (FD_ISSET(fd, readable)) refresh_fd(fd);
  });
}

void refresh_nested(int epfd) noexcept {
  if (g_nesting_count.load(std::memory_order_relaxed) == 0) return;
  refresh([&] { refresh_inner_sets(epfd); });
}

FASTSOCK_CANCELLATION_POINT
bool wait(int epfd, epoll_event* out, int max, const timespec* timeout, const sigset_t* mask,
          long* rc) {
  if (g_set_count.load(std::memory_order_relaxed) == 0) return false;
  if (max <= 0) return false;  // the kernel reports EINVAL
  const SetUse use(epfd);
  if (!use.get()) return false;  // nothing of ours in it: the kernel's wait
  EpollSet& set = *use.get();
  {
    std::lock_guard lock(set.lock);
    if (!set.all && !set.dead) return false;
  }
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  // Before the first sleep, spin within FASTSOCK_SPIN_US (cut to the timeout, as poll()'s):
  // the kernel's events asked without waiting, the ready list walked again. A peer's
  // message then costs no sleep and no wake-up of this thread: redis-server and
  // redis-benchmark over one shm connection did 18,900 requests/s without it, 146,600 with
  // it (docs/shm.md, Measured). The wake descriptors stay armed meanwhile, so nothing is missed.
  link_io::SpinBudget spin(config().spin_us, timeout);
  int yield = -1;  // peer_on_this_cpu, asked once the spin starts
  for (bool first = true;; first = false) {
    int n = 0;
    uint64_t call;
    {
      std::lock_guard lock(set.lock);
      // Its descriptor was closed, or it has no user-link connection (and no buried one
      // whose tags must be filtered): before the wait began, the kernel's wait on the
      // application's number does the rest. Once it began, that number may be closed and
      // handed out again: the wait goes on with the set's own descriptor (kernel_fd), as
      // the kernel's wait holds on to its set.
      if (first && (set.closed || (!set.all && !set.dead))) return false;
      call = ++set.wait_calls;
      // Connections known to be ready (level-triggered ones stay listed while ready, and
      // a new registration or a MOD lists a connection that is ready at once).
      for (Registration** p = &set.ready; *p && n < max;) {
        Registration& r = **p;
        uint32_t ev = 0;
        if (!r.disabled) {
          ev = readiness(r);
          if (!ev) {
            // Leaving the list: arm first, then look once more, so that a change between
            // the two looks wakes the kernel wait instead of being lost.
            (void)arm(r, false);
            ev = readiness(r);
          }
        }
        if (ev) {
          out[n].events = ev;
          out[n].data = r.data;
          ++n;
          r.reported_in = call;
          if (r.events & EPOLLONESHOT) r.disabled = true;
          if (!(r.events & (EPOLLET | EPOLLONESHOT))) { p = &r.next_ready; continue; }
          (void)arm(r, false);  // edge-triggered: the next change must wake us
        }
        *p = r.next_ready;  // not ready, edge-triggered, or one-shot: off the list
        r.on_ready_list = false;
      }
      update_bell(set);
    }
    // The kernel's events: wait only if nothing is ready yet.
    timespec left{0, 0};
    const timespec* wait_for = &left;
    bool for_recheck = false;  // the wait ends early for Transport::recheck_at
    bool spinning = false;     // the wait does not wait: the spin budget is not spent
    if (n == 0 && spin.more()) {
      spinning = true;
      if (yield < 0) yield = peer_on_this_cpu(set);
      if (yield) sched_yield();
    } else if (n == 0) {
      const int64_t now = link_io::now_ns();
      int64_t rest = -1;  // forever
      if (timeout) {
        const int64_t spent = now - (int64_t(start.tv_sec) * 1'000'000'000 + start.tv_nsec);
        const int64_t total = timeout->tv_sec * 1'000'000'000 + timeout->tv_nsec;
        rest = total > spent ? total - spent : 0;
      }
      if (const int64_t recheck = earliest_recheck(set); recheck >= 0) {
        const int64_t in = std::max<int64_t>(recheck - now, 1'000'000);
        if (rest < 0 || in < rest) {
          rest = in;
          for_recheck = true;
        }
      }
      if (rest < 0)
        wait_for = nullptr;
      else
        left = timespec{time_t(rest / 1'000'000'000), long(rest % 1'000'000'000)};
    }
    const int k = real().epoll_pwait2(set.kernel_fd, out + n, max - n, wait_for, mask);
    if (k == 0 && for_recheck) {
      list_rechecks_due(set);
      continue;
    }
    if (k == 0 && spinning) continue;
    if (k < 0) {
      if (n > 0) { *rc = n; return true; }
      *rc = -errno;
      return true;
    }
    {
      std::lock_guard lock(set.lock);
      const bool ours = !set.closed;
      const int end = n + k;
      // Registrations of connections on TCP for good, handed to the kernel once this batch
      // is through (a later event of the batch may still name one).
      Registration* settled[8];
      int n_settled = 0;
      for (int i = n; i < end; ++i) {
        const epoll_event e = out[i];
        if (e.data.ptr == &set) continue;  // the set's own bell
        Registration* r = our_registration(set, e.data.ptr);
        if (!r) {
          out[n++] = e;  // the application's own descriptor
          continue;
        }
        if (r->dead) continue;  // its kernel entries outlived it (bury)
        if (r->dormant) {
          unwatch(*r);
          continue;
        }
        if (r->disabled) continue;
        (void)arm(*r, false);  // first: a change after the check below wakes us again
        if (r->reported_in == call) {
          // Already reported by this call (from the ready list), and something changed
          // since: look again at the next wait.
          push_ready(*r);
          continue;
        }
        const uint32_t ev = readiness(*r);
        if (!ev) continue;
        out[n].events = ev;
        out[n].data = r->data;
        ++n;
        r->reported_in = call;
        if (r->events & EPOLLONESHOT)
          r->disabled = true;
        else if (!(r->events & EPOLLET))
          push_ready(*r);
        if (!ops::user_link(*r->socket) && n_settled < 8 &&
            std::find(settled, settled + n_settled, r) == settled + n_settled)
          settled[n_settled++] = r;
      }
      for (int i = 0; i < n_settled; ++i) (void)hand_to_kernel(*settled[i]);
      if (ours) update_bell(set);
    }
    if (n > 0 || k == 0) { *rc = n; return true; }  // events, or the timeout expired
    // Only wake-ups with nothing ready for the application: wait again for the rest.
  }
}

void rewatch(Socket& s) noexcept {
  if (!s.epoll_regs) return;
  std::lock_guard lock(g_lock);
  for (Registration* r = socket_regs(s); r; r = r->next_of_socket) {
    std::lock_guard set_lock(r->set->lock);
    if (r->dormant) continue;
    (void)arm(*r, false, true);
    // (The change may have made it ready: an edge-triggered registration is reported
    // once, as the kernel would for the new readiness.)
    if (!r->disabled && readiness(*r)) push_ready(*r);
    update_bell(*r->set);
  }
}

// A closing descriptor changes no epoll set the kernel shares with another process: the
// kernel drops an entry only when the last descriptor of its file closes, in any process.
// So an inherited registration (a forked child closing the connections it got) leaves its
// kernel entries to the parent, whose set would otherwise stop reporting them.
void forget_socket(Socket& s) noexcept {
  if (!s.epoll_regs) return;
  std::lock_guard lock(g_lock);
  while (Registration* r = socket_regs(s)) {
    std::lock_guard set_lock(r->set->lock);
    unregister(*r, !r->inherited);
  }
}

void forget_sets(unsigned first, unsigned last) noexcept {
  if (g_set_count.load(std::memory_order_relaxed) == 0 &&
      g_nesting_count.load(std::memory_order_relaxed) == 0)
    return;
  std::lock_guard lock(g_lock);
  for (Nesting** p = &g_nestings; *p;) {
    Nesting* n = *p;
    const bool closing = (unsigned(n->outer) >= first && unsigned(n->outer) <= last) ||
                         (unsigned(n->inner) >= first && unsigned(n->inner) <= last);
    if (!closing) { p = &n->next; continue; }
    *p = n->next;
    delete n;
    g_nesting_count.fetch_sub(1, std::memory_order_relaxed);
  }
  for (EpollSet* set = g_sets; set;) {
    EpollSet* next = set->next;
    if (unsigned(set->epfd) >= first && unsigned(set->epfd) <= last) {
      // The kernel forgets the set's contents with it; we forget our side.
      {
        std::lock_guard set_lock(set->lock);
        while (Registration* r = set->all) {
          set->all = r->next_in_set;
          unlink_from_socket(*r);
          bury(*set, *r);  // a wait holding the set may still get its kernel entries' events
        }
        set->ready = nullptr;
        close_set(set);
      }
      unref_set(set);
    }
    set = next;
  }
}

}  // namespace fastsock::epoll_merge
