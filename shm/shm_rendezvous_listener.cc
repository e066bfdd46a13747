// The acceptor's side of the rendezvous: the record (an abstract SOCK_SEQPACKET listener),
// the table of connectors' channels (idle, hello read, lent to a Handshake) in
// one epoll set, and match()/Handshake. Nothing here waits: a connector's hello precedes
// its SYN.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "internal_fds.hpp"
#include "link_io.hpp"
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
  bool unwatched = false;    // removed from the epoll set (readable while lent)
  bool where_known = false;  // the hello's `where` was read: `where` is its peer endpoint
  bool where_due = false;    // matched by cookie before its `where` came: skip it when it does
  uint64_t waited_in = 0;    // the match() whose wait_for_wheres waited for this hello's where
  stats::Endpoint where{};
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

constexpr const char* kNoSockDiag =
    "cannot identify the peer's socket: NETLINK_SOCK_DIAG for TCP unavailable";

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
  where_wait_ns_ = options.where_wait_ns;
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

  // The record and everything below: out of the application's reach.
  const int fd =
      internal_fds::take(real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
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
    presence = internal_fds::take(real().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
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
    epfd = internal_fds::take(real().epoll_create1(EPOLL_CLOEXEC));
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
  adopted_ = false;
  fork_era_ = fork_era();
  record_fd_ = fd;
  presence_fd_ = presence;
  uid_ = uid;
  port_ = ep.port;
  // Made now rather than at the first connection that needs it, so that it is not the one
  // descriptor too many then (a failure here is retried then).
  (void)diag_.open();
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
  last_hello_ = -1;
  pending_ = 0;
  diag_.close();
  for (Gone& g : gone_) g = Gone{};
}

void Listener::set_state(Entry& e, State state) noexcept {
  const bool was = e.state == State::hello;
  const bool is = state == State::hello;
  pending_ += int(is) - int(was);
  e.state = state;
}

void Listener::drop(Entry& e, uint64_t ListenerCounters::*counter) noexcept {
  if (e.state == State::hello && counter == &ListenerCounters::dropped_closed) {
    // Its connector gave up (a probe connecting and closing at once): if its connection is
    // accepted later, say so rather than "no fastsock dialer".
    Gone& g = gone_[gone_next_];
    gone_next_ = (gone_next_ + 1) % kGoneMemory;
    g.cookie = e.hello.cookie;
    g.where = e.where_known ? e.where : stats::Endpoint{};
  }
  // (Closing the channel's only descriptor also removes it from the epoll set.)
  internal_fds::close(e.fd);
  set_state(e, State::idle);
  e.fd = -1;
  e.fds.reset();
  close_pool(e.pool);
  e.unwatched = false;
  e.where_known = e.where_due = false;
  --used_;
  if (counter) ++(counters_.*counter);
}

// Reads what the channel has: a hello and its `where` (also once the handshake was
// answered, if it was matched by cookie before the `where` came). Each message must be the
// one the channel's state expects; anything else is not our protocol. Two messages per
// system call: a hello with its where, or a hello and the news that nothing follows yet.
Listener::ReadResult Listener::read_channel(Entry& e) noexcept {
  ReadResult result = ReadResult::waiting;
  union Wire {
    HelloWire hello;
    WhereWire where;
    WithdrawWire withdraw;
  } wire[2];
  void* const bufs[2] = {&wire[0], &wire[1]};
  for (;;) {
    Received r[2];
    const int got = recv_two_messages(e.fd, bufs, sizeof(Wire), r);
    bool done = got < 2;  // fewer than two: the channel was empty after them
    for (int i = 0; i < got; ++i) {
      // (A message read with a held where is taken in the state that leaves: only the
      // hello's withdrawal may follow that where before this end replies; anything else
      // drops the channel, as it would have at the next read.)
      const Step step = take_message(e, &wire[i], r[i], result);
      if (step == Step::dropped) {
        for (int j = i + 1; j < got; ++j) close_fds(r[j].control.fds, r[j].control.fd_count);
        return ReadResult::dropped;
      }
      if (step == Step::done) done = true;
      if (step == Step::resumed) done = got < 2;
    }
    if (done) return result;
  }
}

// One message read from the channel, in the entry's state.
Listener::Step Listener::take_message(Entry& e, const void* wire, Received& r,
                                      ReadResult& result) noexcept {
  if (r.len == -EAGAIN) return Step::done;
  if (r.len <= 0) {
    // A channel closed between handshakes is no news; one closed with a handshake
    // under way is a dialer that gave up.
    drop(e, e.state == State::idle ? &ListenerCounters::channels_closed
                                   : &ListenerCounters::dropped_closed);
    return Step::dropped;
  }
  const uint8_t kind = r.len > 8 ? static_cast<const uint8_t*>(wire)[8] : 0;
  const bool where_expected = (e.state == State::hello && !e.where_known) ||
                              (e.state == State::idle && e.where_due);
  if (kind == kKindWhere && where_expected) {
    const bool held = e.state == State::hello;
    if (!take_where(e, wire, r)) return Step::dropped;
    // Nothing follows a held hello's where until this end replies (or, if this end never
    // matches it, until its connector withdraws it).
    return held ? Step::done : Step::next;  // (a skipped where: the next hello may follow)
  }
  if (kind == kKindWithdraw && e.state == State::hello) {
    // The channel is idle again: the next hello may follow at once.
    return take_withdraw(e, wire, r) ? Step::resumed : Step::dropped;
  }
  if (e.state != State::idle) {  // a second hello: not our protocol
    close_fds(r.control.fds, r.control.fd_count);
    drop(e, &ListenerCounters::dropped_malformed);
    return Step::dropped;
  }
  if (take_hello(e, wire, r) == ReadResult::dropped) return Step::dropped;
  result = ReadResult::hello;  // its `where` may follow at once
  return Step::next;
}

// The checks shared by the messages that follow a hello on its channel (where, withdraw):
// decoded (`err`), sent by the hello's pid with our uid, no descriptors, about that hello.
// A refused one drops the channel, its descriptors closed: false then.
bool Listener::accept_follow_up(Entry& e, Received& r, WireError err, bool about_hello,
                                const char* other_hello) noexcept {
  uint64_t ListenerCounters::*refused = &ListenerCounters::dropped_malformed;
  if (!err && (!r.control.has_creds || r.control.creds.uid != uid_ ||
               r.control.creds.pid != e.hello.pid)) {
    err = "dialer of another uid, or not the pid of its hello";
    refused = &ListenerCounters::dropped_uid;
  }
  if (!err) err = check_control(r.control, 0, r.ctrunc);
  if (!err && !about_hello) err = other_hello;
  if (!err) return true;
  close_fds(r.control.fds, r.control.fd_count);
  drop(e, refused);
  return false;
}

bool Listener::take_where(Entry& e, const void* wire, Received& r) noexcept {
  Where w;
  const WireError err = decode_where(wire, size_t(r.len), r.truncated, w);
  if (!accept_follow_up(e, r, err, w.cookie == e.hello.cookie,
                        "where of another socket than the hello's"))
    return false;
  if (e.state == State::hello) {
    e.where = w.connector;
    e.where_known = true;
  } else {
    e.where_due = false;
  }
  return true;
}

// The connector learnt that another process accepted the connection (its bytes came on
// TCP first): the hello it withdraws will never be matched here. Its descriptors go; the
// pool slot it named was never taken (that happens only at a match), so it stays as it was.
bool Listener::take_withdraw(Entry& e, const void* wire, Received& r) noexcept {
  Withdraw w;
  const WireError err = decode_withdraw(wire, size_t(r.len), r.truncated, w);
  if (!accept_follow_up(e, r, err, w.cookie == e.hello.cookie && w.nonce == e.hello.nonce,
                        "withdraw of another hello"))
    return false;
  e.fds.reset();
  e.where_known = e.where_due = false;
  set_state(e, State::idle);
  ++counters_.withdrawn;
  return true;
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
  e.hello = h;
  e.where_known = e.where_due = false;
  e.waited_in = 0;
  e.fds.adopt(r.control.fds, r.control.fd_count);
  set_state(e, State::hello);
  last_hello_ = int(&e - table_);
  return ReadResult::hello;
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
    read_channel(table_[poll_index_[k]]);
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
  e.unwatched = false;
  e.where_known = e.where_due = false;
  e.seq = seq;
  ++used_;
  ++counters_.channels_opened;
  return read_channel(e) == ReadResult::hello;
}

// The held hello of the connection `want` describes: its `where` names want.peer, or its
// cookie is want.cookie (once known).
int Listener::find_hello(const Want& want) const noexcept {
  for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
    const Entry& e = table_[i];
    if (e.fd < 0) continue;
    ++seen;
    if (e.state != State::hello) continue;
    if ((e.where_known && want.peer.family != 0 && same_endpoint(e.where, want.peer)) ||
        (want.cookie != 0 && e.hello.cookie == want.cookie))
      return i;
  }
  return -1;
}

// Asks sock_diag for the peer socket's cookie (once per match, and only while some held
// hello lacks its where), then finds the hello by it.
int Listener::find_by_cookie(Want& want, bool& asked) noexcept {
  if (asked || want.cookie != 0 || !holds_unplaced_hello()) return -1;
  asked = true;
  return identify(want) ? find_hello(want) : -1;
}

// Whether some held hello's `where` has not come: the accepted connection may be its.
bool Listener::holds_unplaced_hello() const noexcept {
  for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
    if (table_[i].fd < 0) continue;
    ++seen;
    if (table_[i].state == State::hello && !table_[i].where_known) return true;
  }
  return false;
}

// Whether the connection `want` describes was a connector's that closed its channel after
// its hello (by its where, or by its cookie if sock_diag was asked anyway: gone connectors
// alone never cost a request). Forgets it: a later connection from that port is another.
bool Listener::was_gone(const Want& want) noexcept {
  for (Gone& g : gone_) {
    if (g.cookie == 0) continue;
    if ((g.where.family != 0 && want.peer.family != 0 && same_endpoint(g.where, want.peer)) ||
        (want.cookie != 0 && g.cookie == want.cookie)) {
      g = Gone{};
      return true;
    }
  }
  return false;
}

// The peer socket's cookie from sock_diag. On failure `want.why` says why.
bool Listener::identify(Want& want) noexcept {
  const char* why = nullptr;
  const int rc = diag_.peer_cookie(want.peer, want.local, &want.cookie, &why);
  if (rc == 0) return true;
  want.cookie = 0;
  want.why = "the peer's socket is not on this host (or closed already)";
  if (rc == -ENOENT) {
    // Also what a kernel without TCP sock_diag answers: look up the accepted socket itself,
    // which exists; if that fails too, sock_diag is what is missing.
    uint64_t own = 0;
    if (diag_.peer_cookie(want.local, want.peer, &own, &why) == 0) return false;
  }
  want.why = kNoSockDiag;
  return false;
}

// Without sock_diag a held hello lacking its where can be placed by its where alone. Its
// connector was preempted between its hello and its where (on one CPU, by this very
// accept, which runs inside the connector's connect()): waits for those wheres, at most
// Options::where_wait_ns, each hello at most once (a connector stopped for good costs one wait).
// The slot of the hello of `want` if its where came, else -1.
int Listener::wait_for_wheres(const Want& want) noexcept {
  const uint64_t round = ++where_wait_rounds_;
  bool any = false;
  for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
    Entry& e = table_[i];
    if (e.fd < 0) continue;
    ++seen;
    if (e.state == State::hello && !e.where_known && e.waited_in == 0) {
      e.waited_in = round;
      any = true;
    }
  }
  const int64_t end = link_io::now_ns() + where_wait_ns_;
  while (any) {
    const int64_t left = end - link_io::now_ns();
    if (left <= 0) break;
    const int n = real().epoll_wait(epoll_fd_, events_, capacity_ + 1,
                                    int((left + 999'999) / 1'000'000));
    if (n < 0 && errno != EINTR) break;
    int found = -1;
    if (n > 0 && handle_events(n, want, found)) {
      ++counters_.by_late_where;
      return found;
    }
    // Go on while a hello waited for in this round still lacks its where.
    any = false;
    for (int i = 0, seen = 0; i < capacity_ && seen < used_ && !any; ++i) {
      const Entry& e = table_[i];
      if (e.fd < 0) continue;
      ++seen;
      any = e.state == State::hello && !e.where_known && e.waited_in == round;
    }
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
  e.where_due = !e.where_known;
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
bool Listener::handle_events(int n, const Want& want, int& found) noexcept {
  bool got = false;
  for (int k = 0; k < n; ++k) {
    const uint64_t tag = events_[k].data.u64;
    if (tag == kRecordTag) {
      // New channels. The connector's Unix connect() returned before it sent its SYN, so
      // a channel made for the accepted connection is in this backlog now (or already in
      // the table). Each new channel's hello (and where) is read at once. FIFO:
      // the wanted one is usually first; the rest stay in the backlog (reported again)
      // rather than crowd the table.
      while (!got) {
        const int fd = internal_fds::take(
            real().accept4(record_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
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
    // (A stale report, of a channel a full table's sweep read earlier in this batch, finds
    // nothing to read.)
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
  diag_.close();  // the parent's replies must not come here
  (void)diag_.open();
  internal_fds::close(epoll_fd_);
  epoll_fd_ = internal_fds::take(real().epoll_create1(EPOLL_CLOEXEC));
  if (epoll_fd_ < 0) return -errno;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kRecordTag;
  if (real().epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, record_fd_, &ev) != 0) return -errno;
  owner_pid_ = current_pid();
  adopted_ = true;
  return 0;
}

bool Listener::shared() const noexcept {
  return adopted_ || owner_pid_ != current_pid() || fork_era() != fork_era_;
}

MatchResult Listener::match(const stats::Endpoint& peer, const stats::Endpoint& local) noexcept {
  Want want;
  want.peer = canonical_endpoint(peer);
  want.local = canonical_endpoint(local);
  if (want.peer.family == 0 || want.peer.family != want.local.family)
    return failed(-EINVAL, "accepted endpoints are not IPv4/IPv6 of one family");
  return match(want);
}

MatchResult Listener::match(uint64_t cookie) noexcept {
  Want want;
  want.cookie = cookie;
  if (cookie == 0) return failed(-EINVAL, "no socket cookie");
  return match(want);
}

// The accepted connection's hello was sent before its SYN: it is in the table already or
// readable now, never later. So nothing is waited for, except on a kernel without
// sock_diag, where a hello whose where has not come can only wait for it (step 5).
MatchResult Listener::match(Want& want) noexcept {
  if (record_fd_ < 0) return failed(-EBADF, "rendezvous record not open");
  if (owner_pid_ != current_pid()) {
    if (const int rc = adopt_after_fork(); rc < 0)
      return failed(rc, "cannot watch the rendezvous record in this process");
  }
  // 1. A hello read during an earlier match (its connection was accepted later).
  if (const int i = find_hello(want); i >= 0) return take(table_[i]);

  // A hello found without its where was found by the cookie sock_diag gave.
  bool asked = false;
  const auto found = [&](int i) {
    if (asked && !table_[i].where_known) ++counters_.by_cookie;
    return take(table_[i]);
  };
  // 2. With one channel only (one connector process, as a benchmark's client or a proxy's
  //    backend), it is read directly: its hello needs no epoll_wait first, nor, if its
  //    where has not come, before sock_diag is asked (step 4). New channels wait in the
  //    record's backlog for step 3; a miss costs this one read more.
  if (used_ == 1 && last_hello_ >= 0 && last_hello_ < capacity_) {
    Entry& e = table_[last_hello_];
    if (e.fd >= 0 && e.state == State::idle && !e.unwatched) {
      (void)read_channel(e);
      if (const int i = find_hello(want); i >= 0) return found(i);
      if (const int i = find_by_cookie(want, asked); i >= 0) return found(i);
    }
  }

  // 3. Everything that arrived: new channels, hellos, wheres, closed channels. A
  //    plain peer costs this one epoll_wait.
  for (;;) {
    int i = -1;
    const int n = real().epoll_wait(epoll_fd_, events_, capacity_ + 1, 0);
    if (n < 0 && errno != EINTR) return failed(-errno, "cannot watch the rendezvous channels");
    if (n > 0 && handle_events(n, want, i)) return found(i);
    if (n < capacity_ + 1) break;  // (a full batch: more may be waiting)
  }

  // 4. A hello whose `where` has not come may be this connection's: its connector was
  //    preempted in connect() (on this CPU, by this very accept). Its socket tells.
  if (const int i = find_by_cookie(want, asked); i >= 0) return found(i);
  // 5. Without sock_diag: the wheres of such hellos, shortly.
  if (want.why == kNoSockDiag)
    if (const int i = wait_for_wheres(want); i >= 0) return take(table_[i]);
  ++counters_.not_fastsock;
  if (was_gone(want))
    return not_fastsock("the connector is gone (it closed its rendezvous channel before the accept)");
  if (want.why) return not_fastsock(want.why);
  // Processes sharing the record each read the channels they accepted: a connector's hello
  // may sit in another one's table (docs/shm-rendezvous.md, Limits), which the reason says.
  return not_fastsock(adopted_ ? "no fastsock dialer's hello reached this process "
                                 "(the listener is shared after fork)"
                               : "no fastsock dialer for this connection");
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
  if (owner_)
    owner_->give_back(slot_, reusable);
  else if (fd_ >= 0)
    internal_fds::close(fd_);  // a late attach's channel (LateOffer::take)
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

int Handshake::accept_in_segment(const char** why) noexcept {
  if (fd_ < 0) {
    *why = "handshake already answered";
    return -EBADF;
  }
  if (hello_.slot_op != SlotOp::reuse) {
    close();
    *why = "only a reused slot is answered in its segment";
    return -EINVAL;
  }
  finish(true);
  return 0;
}

int Handshake::reject(const char* reason, const char** why) noexcept {
  return reply(false, nullptr, 0, reason, why);
}

}  // namespace fastsock::shm
