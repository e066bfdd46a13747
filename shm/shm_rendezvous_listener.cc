// The acceptor's side of the rendezvous: the record (an abstract SOCK_SEQPACKET listener),
// the table of connectors' channels (idle, announced, hello read, lent to a Handshake) in
// one epoll set, and match()/Handshake.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "internal_fds.hpp"
#include "real.hpp"
#include "shm_pool.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"
#include "shm_process.hpp"

namespace fastsock::shm {

struct Listener::Entry {
  int fd = -1;               // one connector's channel; -1: free slot
  State state = State::idle;
  bool waited_out = false;   // its announced hello already cost one whole budget
  bool unwatched = false;    // removed from the epoll set (readable while lent)
  uint64_t seq = 0;          // admission order, for evicting the oldest
  Hello hello{};
  PassedFds fds;
  Pool* pool = nullptr;      // the channel's segment pool (made at its first match)
};

namespace {

// The channel's pool goes with it: idle slots now, slots in use when their connection ends.
void close_pool(Pool*& pool) noexcept {
  if (pool) pool->close();
  pool = nullptr;
}

}  // namespace

namespace {

int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

MatchResult not_fastsock(const char* why) noexcept {
  MatchResult r;
  r.status = MatchStatus::not_fastsock;
  r.why = why;
  return r;
}

MatchResult failed(int error, const char* why) noexcept {
  MatchResult r;
  r.status = MatchStatus::error;
  r.error = error;
  r.why = why;
  return r;
}

}  // namespace

// Listener ----------------------------------------------------------------------------

int Listener::open(const stats::Endpoint& local, const Options& options,
                   const char** why) noexcept {
  close();
  const stats::Endpoint ep = canonical_endpoint(local);
  if (ep.family == 0 || ep.port == 0) {
    *why = "listener endpoint is not an IPv4/IPv6 address with a port";
    return -EINVAL;
  }
  if (options.table_capacity < 1 || options.table_capacity > kMaxTableCapacity) {
    *why = "rendezvous table capacity out of range";
    return -EINVAL;
  }
  const uid_t uid = geteuid();
  sockaddr_un addr;
  const socklen_t addr_len =
      record_address(uid, ep, options.v6only ? Stack::v6only : Stack::dual, addr);
  if (addr_len == 0) {
    *why = "cannot name the rendezvous record";
    return -EINVAL;
  }
  table_ = new (std::nothrow) Entry[size_t(options.table_capacity)];
  pollfds_ = new (std::nothrow) pollfd[size_t(options.table_capacity)];
  poll_index_ = new (std::nothrow) int[size_t(options.table_capacity)];
  events_ = new (std::nothrow) epoll_event[size_t(options.table_capacity) + 1];
  if (!table_ || !pollfds_ || !poll_index_ || !events_) {
    close();
    *why = "no memory for the rendezvous table";
    return -ENOMEM;
  }
  capacity_ = options.table_capacity;

  const int fd = real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  internal_fds::add(fd);  // the record and everything below: out of the application's reach
  if (fd < 0) {
    const int err = -errno;
    close();
    *why = "cannot create the rendezvous record socket";
    return err;
  }
  // Credentials of every dialer's message (inherited by accepted sockets, and attached by
  // the kernel even to messages sent before accept): its uid and pid at send time, with no
  // extra system call per connection.
  const int one = 1;
  int rc = real().setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  const char* step = "cannot ask for dialers' credentials (SO_PASSCRED)";
  if (rc == 0) {
    rc = real().bind(fd, reinterpret_cast<const sockaddr*>(&addr), addr_len);
    step = errno == EADDRINUSE ? "another socket already holds this rendezvous record"
                               : "cannot bind the rendezvous record";
  }
  if (rc == 0) {
    rc = real().listen(fd, SOMAXCONN);
    step = "cannot listen on the rendezvous record";
  }
  // The same name on a datagram socket (abstract names are per socket type): dialers look
  // it up with a cheap datagram connect() before creating anything (see Dialer::dial).
  int presence = -1;
  if (rc == 0) {
    presence = real().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    internal_fds::add(presence);
    rc = presence < 0 ? -1
                      : real().bind(presence, reinterpret_cast<const sockaddr*>(&addr), addr_len);
    // Never read: refuse datagrams (senders get EPIPE) rather than let them queue.
    if (rc == 0) rc = real().shutdown(presence, SHUT_RD);
    step = "cannot publish the rendezvous record's presence";
  }
  // The record and every channel, in one epoll set: match() learns with one call which of
  // them have something to read, however many idle channels there are.
  int epfd = -1;
  if (rc == 0) {
    epfd = real().epoll_create1(EPOLL_CLOEXEC);
    internal_fds::add(epfd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kRecordTag;
    rc = epfd < 0 ? -1 : real().epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    step = "cannot create the rendezvous epoll set";
  }
  if (rc != 0) {
    const int err = -errno;
    if (epfd >= 0) internal_fds::close(epfd);
    if (presence >= 0) internal_fds::close(presence);
    internal_fds::close(fd);
    close();
    *why = step;
    return err;
  }
  epoll_fd_ = epfd;
  owner_pid_ = current_pid();
  record_fd_ = fd;
  presence_fd_ = presence;
  uid_ = uid;
  port_ = ep.port;
  return 0;
}

void Listener::close() noexcept {
  if (record_fd_ >= 0) internal_fds::close(record_fd_);
  if (presence_fd_ >= 0) internal_fds::close(presence_fd_);
  if (epoll_fd_ >= 0) internal_fds::close(epoll_fd_);
  record_fd_ = -1;
  presence_fd_ = -1;
  epoll_fd_ = -1;
  if (table_) {
    for (int i = 0; i < capacity_; ++i) {
      if (table_[i].fd >= 0) internal_fds::close(table_[i].fd);
      table_[i].fd = -1;
      table_[i].fds.reset();
      close_pool(table_[i].pool);
    }
  }
  delete[] table_;
  delete[] pollfds_;
  delete[] poll_index_;
  delete[] events_;
  table_ = nullptr;
  pollfds_ = nullptr;
  poll_index_ = nullptr;
  events_ = nullptr;
  capacity_ = 0;
  used_ = 0;
  pending_ = 0;
  for (stats::Endpoint& e : given_up_) e = stats::Endpoint{};
}

void Listener::set_state(Entry& e, State state) noexcept {
  const bool was = e.state == State::announced || e.state == State::hello;
  const bool is = state == State::announced || state == State::hello;
  pending_ += int(is) - int(was);
  e.state = state;
}

void Listener::drop(Entry& e, uint64_t ListenerCounters::*counter) noexcept {
  // (Closing the channel's only descriptor also removes it from the epoll set.)
  internal_fds::close(e.fd);
  set_state(e, State::idle);
  e.fd = -1;
  e.fds.reset();
  close_pool(e.pool);
  e.waited_out = false;
  e.unwatched = false;
  --used_;
  if (counter) ++(counters_.*counter);
}

// Reads what the channel has, at most an intent and the hello that follows it. Each
// message must be the one the channel's state expects; anything else is not our protocol.
Listener::ReadResult Listener::read_channel(Entry& e) noexcept {
  for (;;) {
    union {
      HelloWire hello;
      IntentWire intent;
    } wire;
    Received r;
    recv_message(e.fd, &wire, sizeof wire, r);
    if (r.len == -EAGAIN) return ReadResult::waiting;
    if (r.len <= 0) {
      // A channel closed between handshakes is no news; one closed with a handshake
      // under way is a dialer that gave up.
      drop(e, e.state == State::idle ? &ListenerCounters::channels_closed
                                     : &ListenerCounters::dropped_closed);
      return ReadResult::dropped;
    }
    if (e.state == State::idle) {
      uint64_t ListenerCounters::*refused = &ListenerCounters::dropped_malformed;
      WireError err = decode_intent(&wire, size_t(r.len), r.truncated);
      if (!err && (!r.control.has_creds || r.control.creds.uid != uid_)) {
        err = "dialer of another uid";
        refused = &ListenerCounters::dropped_uid;
      }
      if (!err) err = check_control(r.control, 0, r.ctrunc);
      if (err) {
        close_fds(r.control.fds, r.control.fd_count);
        drop(e, refused);
        return ReadResult::dropped;
      }
      e.waited_out = false;
      set_state(e, State::announced);
      continue;  // the hello often follows at once
    }
    if (e.state != State::announced) {  // a second hello: not our protocol
      close_fds(r.control.fds, r.control.fd_count);
      drop(e, &ListenerCounters::dropped_malformed);
      return ReadResult::dropped;
    }
    return take_hello(e, &wire.hello, r);
  }
}

Listener::ReadResult Listener::take_hello(Entry& e, const void* wire, Received& r) noexcept {
  Hello h;
  uint64_t ListenerCounters::*refused = &ListenerCounters::dropped_malformed;
  WireError err = decode_hello(wire, size_t(r.len), r.truncated, h);
  if (!err && (!r.control.has_creds || r.control.creds.uid != uid_ ||
               r.control.creds.pid != h.pid)) {
    err = "dialer of another uid, or not the pid its hello claims";
    refused = &ListenerCounters::dropped_uid;
  }
  if (!err) err = check_control(r.control, h.fd_count, r.ctrunc);
  if (!err && h.server_port != port_) err = "hello for another port";
  if (err) {
    close_fds(r.control.fds, r.control.fd_count);
    drop(e, refused);
    return ReadResult::dropped;
  }
  if (forget_given_up(h.connector)) {
    // Its connection was accepted and left on TCP before this hello came: say so, or the
    // connector would wait for a reply forever. The channel serves its next connection.
    close_fds(r.control.fds, r.control.fd_count);
    const ReplyWire no = encode_reply(false, current_pid(), h.nonce, 0,
                                      "the acceptor stopped waiting for this hello");
    ++counters_.rejected_late;
    if (send_message(e.fd, &no, sizeof no, nullptr, 0) != 0) {
      drop(e, nullptr);
      return ReadResult::dropped;
    }
    set_state(e, State::idle);
    return ReadResult::waiting;
  }
  e.hello = h;
  e.fds.adopt(r.control.fds, r.control.fd_count);
  set_state(e, State::hello);
  return ReadResult::hello;
}

void Listener::remember_given_up(const stats::Endpoint& peer) noexcept {
  given_up_[given_up_next_] = peer;
  given_up_next_ = (given_up_next_ + 1) % kGivenUpMemory;
}

bool Listener::forget_given_up(const stats::Endpoint& peer) noexcept {
  for (stats::Endpoint& e : given_up_) {
    if (same_endpoint(e, peer)) {
      e = stats::Endpoint{};
      return true;
    }
  }
  return false;
}

// Reads every channel with something to read, in one ppoll over the table (only when the
// table is full: closed channels are dropped before anyone is evicted).
void Listener::sweep_closed() noexcept {
  int n = 0;
  for (int i = 0; i < capacity_; ++i) {
    if (table_[i].fd < 0 || table_[i].state == State::lent) continue;
    pollfds_[n] = {table_[i].fd, POLLIN, 0};
    poll_index_[n++] = i;
  }
  const timespec zero{0, 0};
  if (n == 0 || real().ppoll(pollfds_, nfds_t(n), &zero, nullptr) <= 0) return;
  for (int k = 0; k < n; ++k) {
    if (pollfds_[k].revents == 0) continue;
    Entry& e = table_[poll_index_[k]];
    if (e.state == State::hello)
      drop(e, pollfds_[k].revents & (POLLHUP | POLLERR) ? &ListenerCounters::dropped_closed
                                                         : &ListenerCounters::dropped_malformed);
    else
      read_channel(e);
  }
}

// A new channel from the record's backlog; false if it could not be watched (closed).
bool Listener::admit(int fd) noexcept {
  if (used_ == capacity_) sweep_closed();
  if (used_ == capacity_) {
    // Idle channels go first (their connector just dials a new one next time), then the
    // oldest handshake.
    int oldest = -1;
    for (int pass = 0; pass < 2 && oldest < 0; ++pass) {
      for (int i = 0; i < capacity_; ++i) {
        const Entry& e = table_[i];
        if (e.fd < 0 || e.state == State::lent || (pass == 0 && e.state != State::idle)) continue;
        if (oldest < 0 || e.seq < table_[oldest].seq) oldest = i;
      }
    }
    if (oldest < 0) {  // every entry is lent to a handshake under way
      internal_fds::close(fd);
      ++counters_.evicted;
      return false;
    }
    drop(table_[oldest], &ListenerCounters::evicted);
  }
  int slot = 0;
  while (table_[slot].fd >= 0) ++slot;
  const uint64_t seq = admitted_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = event_tag(slot, seq);
  if (real().epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    internal_fds::close(fd);
    ++counters_.dropped_closed;
    return false;
  }
  Entry& e = table_[slot];
  e.fd = fd;
  e.state = State::idle;
  e.waited_out = false;
  e.unwatched = false;
  e.seq = seq;
  ++used_;
  ++counters_.channels_opened;
  return read_channel(e) == ReadResult::hello;
}

int Listener::find_hello(const stats::Endpoint& peer) const noexcept {
  for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
    if (table_[i].fd < 0) continue;
    ++seen;
    if (table_[i].state == State::hello && same_endpoint(table_[i].hello.connector, peer))
      return i;
  }
  return -1;
}

MatchResult Listener::take(Entry& e) noexcept {
  MatchResult r;
  r.status = MatchStatus::matched;
  r.handshake.owner_ = this;
  r.handshake.slot_ = int(&e - table_);
  r.handshake.fd_ = e.fd;
  r.handshake.hello_ = e.hello;
  if (!e.pool) e.pool = Pool::create();
  r.handshake.pool_ = e.pool;
  r.handshake.fds_ = static_cast<PassedFds&&>(e.fds);
  set_state(e, State::lent);
  ++counters_.matched;
  return r;
}

void Listener::give_back(int slot, bool reusable) noexcept {
  if (!table_ || slot < 0 || slot >= capacity_ || table_[slot].state != State::lent) return;
  Entry& e = table_[slot];
  // A channel that became readable while lent broke the protocol or closed.
  if (!reusable || e.unwatched) {
    drop(e, nullptr);
    return;
  }
  set_state(e, State::idle);
}

// Handles what one epoll_wait reported. True with `found` when the hello of `want` came.
bool Listener::handle_events(int n, const stats::Endpoint& want, int& found) noexcept {
  bool got = false;
  for (int k = 0; k < n; ++k) {
    const uint64_t tag = events_[k].data.u64;
    if (tag == kRecordTag) {
      // New channels. The connector's Unix connect() returned before it sent its SYN, so
      // a channel made for the accepted connection is in this backlog now (or already in
      // the table). Each new channel's intent (and maybe its hello) is read at once. FIFO:
      // the wanted one is usually first; the rest stay in the backlog (reported again)
      // rather than crowd the table.
      while (!got) {
        const int fd = real().accept4(record_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        internal_fds::add(fd);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          break;  // EAGAIN, or an error the next match() sees again
        }
        if (admit(fd) && find_hello(want) >= 0) got = true;
      }
      continue;
    }
    // An event of a channel dropped meanwhile (its slot may hold a newer one) is stale.
    const uint64_t slot = tag & kSlotMask;
    if (slot >= uint64_t(capacity_) || table_[slot].fd < 0 ||
        event_tag(int(slot), table_[slot].seq) != tag)
      continue;
    Entry& e = table_[slot];
    if (e.state == State::lent) {
      // Its handshake is being answered elsewhere; the channel must stay quiet until then.
      // Stop watching it (level-triggered, it would be reported again and again); it is
      // dropped when given back.
      (void)real().epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, e.fd, nullptr);
      e.unwatched = true;
      continue;
    }
    if (e.state == State::hello) {
      // Readable after its hello: closed, or a message after the hello. Unless the report
      // is stale: a full table's sweep (admit, earlier in this batch) reads every readable
      // channel, so it may have read this very hello after epoll_wait reported it.
      pollfd p{e.fd, POLLIN, 0};
      const timespec zero{0, 0};
      if (real().ppoll(&p, 1, &zero, nullptr) != 1) continue;
      drop(e, p.revents & (POLLHUP | POLLERR) ? &ListenerCounters::dropped_closed
                                              : &ListenerCounters::dropped_malformed);
      continue;
    }
    read_channel(e);
  }
  // Looked up once every event was handled: an entry found earlier in the batch could have
  // been dropped by a later event.
  found = find_hello(want);
  return found >= 0;
}

// In a process forked after open() (workers of a pre-fork server accepting on an inherited
// socket): the record is shared, but the epoll set and the channels are the parent's. The
// child closes its copies (the parent's stay open) and watches the record in a set of its
// own, so that each process reads only the channels it accepted.
int Listener::adopt_after_fork() noexcept {
  for (int i = 0; i < capacity_; ++i) {
    Entry& e = table_[i];
    if (e.fd < 0) continue;
    internal_fds::close(e.fd);
    e.fd = -1;
    e.fds.reset();
    close_pool(e.pool);  // the parent's: only this process's copies go
    e.state = State::idle;
  }
  used_ = 0;
  pending_ = 0;
  internal_fds::close(epoll_fd_);
  epoll_fd_ = real().epoll_create1(EPOLL_CLOEXEC);
  internal_fds::add(epoll_fd_);
  if (epoll_fd_ < 0) return -errno;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kRecordTag;
  if (real().epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, record_fd_, &ev) != 0) return -errno;
  owner_pid_ = current_pid();
  return 0;
}

MatchResult Listener::match(const stats::Endpoint& peer, uint32_t budget_us,
                           uint32_t spin_us) noexcept {
  if (record_fd_ < 0) return failed(-EBADF, "rendezvous record not open");
  if (owner_pid_ != current_pid()) {
    if (const int rc = adopt_after_fork(); rc < 0)
      return failed(rc, "cannot watch the rendezvous record in this process");
  }
  const stats::Endpoint want = canonical_endpoint(peer);
  if (want.family == 0) return failed(-EINVAL, "peer endpoint is not IPv4/IPv6");

  // 1. A hello read during an earlier match (its connection was accepted later).
  if (const int i = find_hello(want); i >= 0) return take(table_[i]);

  // 2. Everything that arrived: new channels, intents, hellos, closed channels. A plain
  //    peer costs this one epoll_wait.
  for (;;) {
    int found = -1;
    const int n = real().epoll_wait(epoll_fd_, events_, capacity_ + 1, 0);
    if (n < 0 && errno != EINTR) return failed(-errno, "cannot watch the rendezvous channels");
    if (n > 0 && handle_events(n, want, found)) return take(table_[found]);
    if (n < capacity_ + 1) break;  // (a full batch: more may be waiting)
  }

  // 3. Channels that announced a connection whose hello has not arrived.
  return wait_for_hello(want, budget_us, spin_us);
}

// Waits for the hellos of channels that announced a connection without sending its hello
// yet: one of them may be the accepted connection's (it is between its TCP connect and its
// sendmsg). With none such, the peer does not run fastsock and this returns at once. The
// first `spin_us` of the budget poll without sleeping (the dialer usually runs on another
// CPU and is microseconds away from its sendmsg; a sleep and wake-up would cost more), the
// rest sleeps in epoll_wait. An announcement that already cost a whole budget is still read
// if its hello comes, but no longer waited for.
MatchResult Listener::wait_for_hello(const stats::Endpoint& want, uint32_t budget_us,
                                     uint32_t spin_us) noexcept {
  const int64_t start = now_ns();
  const int64_t deadline = start + int64_t(budget_us) * 1000;
  const int64_t spin_until = start + int64_t(spin_us < budget_us ? spin_us : budget_us) * 1000;
  for (;;) {
    int silent = 0;
    bool fresh = false;
    for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
      if (table_[i].fd < 0) continue;
      ++seen;
      if (table_[i].state != State::announced) continue;
      ++silent;
      fresh = fresh || !table_[i].waited_out;
    }
    if (silent == 0) {
      ++counters_.not_fastsock;
      return not_fastsock("no fastsock dialer for this connection");
    }
    const int64_t now = now_ns();
    const bool spinning = fresh && now < spin_until;
    int64_t left = fresh && !spinning ? deadline - now : 0;
    if (left < 0) left = 0;
    if (left > 0) ++counters_.waits;
    // epoll_wait counts in milliseconds: round up, and re-check the clock on return.
    const int timeout_ms = int((left + 999'999) / 1'000'000);
    const int ready = real().epoll_wait(epoll_fd_, events_, capacity_ + 1, timeout_ms);
    if (ready < 0 && errno != EINTR) return failed(-errno, "cannot wait for dialers' hellos");
    int found = -1;
    if (ready > 0 && handle_events(ready, want, found)) return take(table_[found]);
    if (ready > 0 || (ready < 0) || spinning) continue;
    if (now_ns() < deadline && fresh) continue;
    // Nothing more arrived within the budget: the silent channels are someone else's.
    for (int i = 0; i < capacity_; ++i)
      if (table_[i].fd >= 0 && table_[i].state == State::announced) table_[i].waited_out = true;
    if (fresh) {
      ++counters_.budget_expired;
      remember_given_up(want);
    }
    ++counters_.not_fastsock;
    return not_fastsock(fresh ? "no hello from a fastsock dialer within the budget"
                              : "no fastsock dialer for this connection");
  }
}

// Handshake ---------------------------------------------------------------------------

Handshake::Handshake(Handshake&& o) noexcept { *this = static_cast<Handshake&&>(o); }

Handshake& Handshake::operator=(Handshake&& o) noexcept {
  if (this != &o) {
    close();
    owner_ = o.owner_;
    slot_ = o.slot_;
    fd_ = o.fd_;
    hello_ = o.hello_;
    pool_ = o.pool_;
    fds_ = static_cast<PassedFds&&>(o.fds_);
    o.owner_ = nullptr;
    o.fd_ = -1;
    o.pool_ = nullptr;
  }
  return *this;
}

void Handshake::finish(bool reusable) noexcept {
  if (owner_) owner_->give_back(slot_, reusable);
  owner_ = nullptr;
  fd_ = -1;
  pool_ = nullptr;
  fds_.reset();
}

void Handshake::close() noexcept {
  // Unanswered: the channel is closed, so the connector sees "gone".
  if (fd_ >= 0) finish(false);
}

int Handshake::reply(bool accepted, const int* fds, int count, const char* reason,
                     const char** why) noexcept {
  if (fd_ < 0) {
    *why = "handshake already answered";
    return -EBADF;
  }
  if (count < 0 || count > kMaxPassedFds) {
    close();
    *why = "too many descriptors for the reply";
    return -EINVAL;
  }
  const ReplyWire wire = encode_reply(accepted, current_pid(), hello_.nonce, uint8_t(count), reason);
  const int rc = send_message(fd_, &wire, sizeof wire, fds, count);
  finish(rc == 0);
  if (rc != 0) *why = rc == -EPIPE ? "the connector is gone" : "cannot send the reply";
  return rc;
}

int Handshake::accept(const int* fds, int count, const char** why) noexcept {
  return reply(true, fds, count, nullptr, why);
}

int Handshake::reject(const char* reason, const char** why) noexcept {
  return reply(false, nullptr, 0, reason, why);
}

}  // namespace fastsock::shm
