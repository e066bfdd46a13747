// The acceptor's side of the rendezvous: the record (an abstract SOCK_SEQPACKET listener),
// the table of dialers read but not matched yet, and match()/Handshake.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "real.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"
#include "shm_process.hpp"

namespace fastsock::shm {

struct Listener::Entry {
  int fd = -1;               // the Unix connection of one dialer; -1: free slot
  bool has_hello = false;
  bool waited_out = false;   // already cost one whole budget: not waited for again
  uint64_t seq = 0;          // admission order, for evicting the oldest
  Hello hello{};
  PassedFds fds;
};

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
  if (!table_ || !pollfds_ || !poll_index_) {
    close();
    *why = "no memory for the rendezvous table";
    return -ENOMEM;
  }
  capacity_ = options.table_capacity;

  const int fd = real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
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
    rc = presence < 0 ? -1
                      : real().bind(presence, reinterpret_cast<const sockaddr*>(&addr), addr_len);
    // Never read: refuse datagrams (senders get EPIPE) rather than let them queue.
    if (rc == 0) rc = real().shutdown(presence, SHUT_RD);
    step = "cannot publish the rendezvous record's presence";
  }
  if (rc != 0) {
    const int err = -errno;
    if (presence >= 0) real().close(presence);
    real().close(fd);
    close();
    *why = step;
    return err;
  }
  record_fd_ = fd;
  presence_fd_ = presence;
  uid_ = uid;
  port_ = ep.port;
  return 0;
}

void Listener::close() noexcept {
  if (record_fd_ >= 0) real().close(record_fd_);
  if (presence_fd_ >= 0) real().close(presence_fd_);
  record_fd_ = -1;
  presence_fd_ = -1;
  if (table_) {
    for (int i = 0; i < capacity_; ++i) {
      if (table_[i].fd >= 0) real().close(table_[i].fd);
      table_[i].fd = -1;
      table_[i].fds.reset();
    }
  }
  delete[] table_;
  delete[] pollfds_;
  delete[] poll_index_;
  table_ = nullptr;
  pollfds_ = nullptr;
  poll_index_ = nullptr;
  capacity_ = 0;
  used_ = 0;
  for (stats::Endpoint& e : given_up_) e = stats::Endpoint{};
}

void Listener::drop(Entry& e, uint64_t ListenerCounters::*counter) noexcept {
  real().close(e.fd);
  e.fd = -1;
  e.fds.reset();
  e.has_hello = false;
  e.waited_out = false;
  --used_;
  ++(counters_.*counter);
}

Listener::ReadResult Listener::read_hello(Entry& e) noexcept {
  HelloWire wire;
  Received r;
  recv_message(e.fd, &wire, sizeof wire, r);
  if (r.len == -EAGAIN) return ReadResult::waiting;
  if (r.len <= 0) {
    drop(e, &ListenerCounters::dropped_closed);
    return ReadResult::dropped;
  }
  Hello h;
  uint64_t ListenerCounters::*refused = &ListenerCounters::dropped_malformed;
  WireError err = decode_hello(&wire, size_t(r.len), r.truncated, h);
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
    // connector would wait for a reply forever.
    close_fds(r.control.fds, r.control.fd_count);
    const ReplyWire no = encode_reply(false, current_pid(), h.nonce, 0,
                                      "the acceptor stopped waiting for this hello");
    send_message(e.fd, &no, sizeof no, nullptr, 0);
    drop(e, &ListenerCounters::rejected_late);
    return ReadResult::dropped;
  }
  e.hello = h;
  e.fds.adopt(r.control.fds, r.control.fd_count);
  e.has_hello = true;
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

// Drops the dialers that closed while waiting in the table, in one ppoll over the table.
void Listener::sweep_closed() noexcept {
  int n = 0;
  for (int i = 0; i < capacity_; ++i) {
    if (table_[i].fd < 0) continue;
    pollfds_[n] = {table_[i].fd, POLLIN, 0};
    poll_index_[n++] = i;
  }
  const timespec zero{0, 0};
  if (n == 0 || real().ppoll(pollfds_, nfds_t(n), &zero, nullptr) <= 0) return;
  for (int k = 0; k < n; ++k) {
    if (pollfds_[k].revents == 0) continue;
    Entry& e = table_[poll_index_[k]];
    if (!e.has_hello)
      read_hello(e);  // a hello or the end of the dialer: either settles the entry
    else if (pollfds_[k].revents & (POLLHUP | POLLERR))
      drop(e, &ListenerCounters::dropped_closed);
    else
      drop(e, &ListenerCounters::dropped_malformed);  // a second message: not our protocol
  }
}

int Listener::admit(int fd) noexcept {
  if (used_ == capacity_) sweep_closed();
  if (used_ == capacity_) {
    int oldest = -1;
    for (int i = 0; i < capacity_; ++i)
      if (table_[i].fd >= 0 && (oldest < 0 || table_[i].seq < table_[oldest].seq)) oldest = i;
    drop(table_[oldest], &ListenerCounters::evicted);
  }
  int slot = 0;
  while (table_[slot].fd >= 0) ++slot;
  Entry& e = table_[slot];
  e.fd = fd;
  e.has_hello = false;
  e.waited_out = false;
  e.seq = admitted_++;
  ++used_;
  return slot;
}

int Listener::find_hello(const stats::Endpoint& peer) const noexcept {
  for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
    if (table_[i].fd < 0) continue;
    ++seen;
    if (table_[i].has_hello && same_endpoint(table_[i].hello.connector, peer)) return i;
  }
  return -1;
}

MatchResult Listener::take(Entry& e) noexcept {
  MatchResult r;
  r.status = MatchStatus::matched;
  r.handshake.fd_ = e.fd;
  r.handshake.hello_ = e.hello;
  r.handshake.fds_ = static_cast<PassedFds&&>(e.fds);
  e.fd = -1;
  e.has_hello = false;
  --used_;
  ++counters_.matched;
  return r;
}

MatchResult Listener::match(const stats::Endpoint& peer, uint32_t budget_us,
                           uint32_t spin_us) noexcept {
  if (record_fd_ < 0) return failed(-EBADF, "rendezvous record not open");
  const stats::Endpoint want = canonical_endpoint(peer);
  if (want.family == 0) return failed(-EINVAL, "peer endpoint is not IPv4/IPv6");

  // 1. A hello read during an earlier match (its connection was accepted later).
  if (const int i = find_hello(want); i >= 0) return take(table_[i]);

  // 2. The record's backlog. The connector's Unix connect() returned before it sent its
  //    SYN, so if the accepted connection comes from a fastsock dialer, that dialer is in
  //    this backlog now (or already in the table). FIFO: usually it is the first one.
  for (;;) {
    const int fd = real().accept4(record_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN) break;
      return failed(-errno, "cannot accept from the rendezvous record");
    }
    Entry& e = table_[admit(fd)];
    if (read_hello(e) == ReadResult::hello && same_endpoint(e.hello.connector, want))
      return take(e);
  }

  // 3. Dialers that connected but whose hello has not arrived.
  return wait_for_hello(want, budget_us, spin_us);
}

// Waits for the hellos of dialers that connected without sending one yet: one of them may
// be the accepted connection's (it is between its TCP connect and its sendmsg). With none
// such, the peer does not run fastsock and this returns at once. The first `spin_us` of the
// budget poll without sleeping (the dialer usually runs on another CPU and is microseconds
// away from its sendmsg; a sleep and wake-up would cost more), the rest sleeps in ppoll.
// An entry that already cost a whole budget is still read if its hello is there, but no
// longer waited for.
MatchResult Listener::wait_for_hello(const stats::Endpoint& want, uint32_t budget_us,
                                     uint32_t spin_us) noexcept {
  const int64_t start = now_ns();
  const int64_t deadline = start + int64_t(budget_us) * 1000;
  const int64_t spin_until = start + int64_t(spin_us < budget_us ? spin_us : budget_us) * 1000;
  for (;;) {
    int n = 0;
    bool fresh = false;
    for (int i = 0, seen = 0; i < capacity_ && seen < used_; ++i) {
      if (table_[i].fd < 0) continue;
      ++seen;
      if (table_[i].has_hello) continue;
      pollfds_[n] = {table_[i].fd, POLLIN, 0};
      poll_index_[n++] = i;
      fresh = fresh || !table_[i].waited_out;
    }
    if (n == 0) {
      ++counters_.not_fastsock;
      return not_fastsock("no fastsock dialer for this connection");
    }
    const int64_t now = now_ns();
    const bool spinning = fresh && now < spin_until;
    int64_t left = fresh && !spinning ? deadline - now : 0;
    if (left < 0) left = 0;
    if (left > 0) ++counters_.waits;
    const timespec ts{time_t(left / 1'000'000'000), long(left % 1'000'000'000)};
    const int ready = real().ppoll(pollfds_, nfds_t(n), &ts, nullptr);
    if (ready < 0 && errno != EINTR) return failed(-errno, "cannot wait for dialers' hellos");
    if (ready == 0 && spinning) continue;
    if (ready == 0) {
      // Nothing more arrived within the budget: the silent dialers are someone else's.
      for (int k = 0; k < n; ++k) table_[poll_index_[k]].waited_out = true;
      if (fresh) {
        ++counters_.budget_expired;
        remember_given_up(want);
      }
      ++counters_.not_fastsock;
      return not_fastsock(fresh ? "no hello from a fastsock dialer within the budget"
                                : "no fastsock dialer for this connection");
    }
    // Each ready entry is settled (hello read or dropped), so the set to wait for shrinks.
    for (int k = 0; k < n; ++k) {
      if (pollfds_[k].revents == 0) continue;
      Entry& e = table_[poll_index_[k]];
      if (read_hello(e) == ReadResult::hello && same_endpoint(e.hello.connector, want))
        return take(e);
    }
  }
}

// Handshake ---------------------------------------------------------------------------

Handshake::Handshake(Handshake&& o) noexcept { *this = static_cast<Handshake&&>(o); }

Handshake& Handshake::operator=(Handshake&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    hello_ = o.hello_;
    fds_ = static_cast<PassedFds&&>(o.fds_);
    o.fd_ = -1;
  }
  return *this;
}

void Handshake::close() noexcept {
  if (fd_ >= 0) real().close(fd_);
  fd_ = -1;
  fds_.reset();
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
  close();
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
