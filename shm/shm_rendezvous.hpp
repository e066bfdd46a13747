// Rendezvous of the shm transport: how a connecting and an accepting process that both run
// fastsock find each other and exchange descriptors, with no service thread, no wait on a
// peer that does not run fastsock, and nothing left in /dev/shm (docs/shm-rendezvous.md).
//
//   acceptor                                   connector
//   Listener::open(local)  (after listen)
//                                              Dialer::dial(dst)          a channel
//                                              Dialer::send_hello(cookie, fds)   before the SYN
//                                              TCP connect()
//                                              Dialer::send_where(local)
//   TCP accept() -> peer
//   Listener::match(peer, local) -> Handshake  (by the `where`, or, if it has not come yet,
//                                               by the peer's socket cookie from sock_diag)
//   Handshake::accept(fds) / reject(reason)
//                                              Dialer::poll_reply()       any time later
//
// The messages travel on a channel (a SOCK_SEQPACKET connection to the listener's record)
// that both ends keep open between handshakes: one handshake at a time per channel, one
// channel per concurrent handshake of a connector process (shm_rendezvous_channels.hpp).
//
// Every function is noexcept, returns 0 / -errno or a status, and on failure points `why`
// at a static sentence. libc calls go through fastsock::real().
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "shm_peer_cookie.hpp"
#include "shm_rendezvous_wire.hpp"
#include "stats_layout.hpp"

namespace fastsock::shm {

class Pool;  // shm_pool.hpp

// Idle channels kept per destination (shm_rendezvous_channels.hpp). A connection holds its
// channel from its hello until the acceptor's answer is seen, so a client that opens its
// connections in bursts (wrk with a connection per request: all of them at once) holds one
// per connection; those beyond the bound close when given back, and with them their pools
// of segments. With 4, a fifth of wrk -c8's connections made a new segment at both ends
// (mmap, page clearing, and at the close, munmap with its TLB shootdowns), and with 8, a
// third of wrk -c32's; with 32, only the first ones
// (bench/results/channels-per-destination.txt). An idle channel costs a descriptor at
// each end; its pool's segments are those its connections used at once.
inline constexpr int channels_per_destination = 32;

// Descriptors received from the peer, owned until taken; the rest close with the object.
class PassedFds {
 public:
  PassedFds() noexcept = default;
  PassedFds(PassedFds&& o) noexcept;
  PassedFds& operator=(PassedFds&& o) noexcept;
  PassedFds(const PassedFds&) = delete;
  PassedFds& operator=(const PassedFds&) = delete;
  ~PassedFds() { reset(); }

  int count() const noexcept { return count_; }
  // The i-th descriptor, still owned here (-1 if out of range or taken).
  int get(int i) const noexcept { return i >= 0 && i < count_ ? fds_[i] : -1; }
  // Transfers ownership of the i-th descriptor to the caller (-1 if out of range or taken).
  int take(int i) noexcept;
  void reset() noexcept;  // closes every descriptor still owned
  // Adopts `n` descriptors (n <= kMaxPassedFds).
  void adopt(const int* fds, int n) noexcept;

 private:
  int fds_[kMaxPassedFds] = {-1, -1, -1, -1};
  int count_ = 0;
};

// Counters of one listener, for stats and tests. Every hello ends in exactly
// one of matched / dropped_* / evicted / still in the table.
struct ListenerCounters {
  uint64_t channels_opened = 0;    // connectors' channels accepted from the record
  uint64_t channels_closed = 0;    // ... closed by their connector between handshakes
  uint64_t matched = 0;            // match() found the dialer of the accepted connection
  uint64_t by_cookie = 0;          // ... of which before its `where` came (through sock_diag)
  uint64_t by_late_where = 0;      // ... of which by a `where` match() waited for (no sock_diag)
  uint64_t not_fastsock = 0;       // match() decided the peer does not run fastsock
  uint64_t dropped_closed = 0;     // dialer closed its channel during a handshake
  uint64_t withdrawn = 0;          // dialer withdrew its unmatched hello (channel kept)
  uint64_t dropped_uid = 0;        // credentials of another uid, or pid != the hello's pid
  uint64_t dropped_malformed = 0;  // hello or its control data refused
  uint64_t evicted = 0;            // table full: the oldest idle channel (or, with none,
                                   // the oldest handshake) was dropped
};

class Listener;
class LateOffer;  // shm_rendezvous_late.hpp

// The acceptor's side of one matched connector: the connector's channel, lent by the
// Listener until answered, and the descriptors its hello carried. Destroying it unanswered
// closes the channel (the dialer sees "gone"). Answer or close it before its Listener
// closes, under the same serialisation as match().
class Handshake {
 public:
  Handshake() noexcept = default;
  Handshake(Handshake&& o) noexcept;
  Handshake& operator=(Handshake&& o) noexcept;
  Handshake(const Handshake&) = delete;
  Handshake& operator=(const Handshake&) = delete;
  ~Handshake() { close(); }

  bool valid() const noexcept { return fd_ >= 0; }
  const Hello& hello() const noexcept { return hello_; }
  PassedFds& fds() noexcept { return fds_; }  // the connector's descriptors
  // The channel's segment pool (shm_pool.hpp), valid until the Handshake is answered or
  // closed (take a reference to keep it longer); nullptr when out of memory.
  Pool* pool() const noexcept { return pool_; }

  // Answers the connector and gives the channel back to the Listener for the connector's
  // next connection. accept() passes `count` (<= kMaxPassedFds) of the caller's
  // descriptors, which the caller keeps. 0, or -errno with `why` (-EPIPE: the dialer is
  // gone). Either way the Handshake is closed afterwards, with the connector's descriptors
  // the caller did not take() from fds() first.
  int accept(const int* fds, int count, const char** why) noexcept;
  int reject(const char* reason, const char** why) noexcept;
  // Accepts a reuse of a pooled slot (hello().slot_op == SlotOp::reuse) with no message:
  // the caller's confirmation in the slot's segment, which must follow, is the answer
  // (Dialer::answered_in_segment). The channel goes back to the Listener first, so the
  // connector's next hello, sent once it sees the confirmation, finds it idle. -EINVAL
  // (and the Handshake is closed) for any other hello.
  int accept_in_segment(const char** why) noexcept;

  void close() noexcept;

 private:
  friend class Listener;
  friend class LateOffer;  // a late attach's hello: no Listener owns its channel
  int reply(bool accepted, const int* fds, int count, const char* reason,
            const char** why) noexcept;
  void finish(bool reusable) noexcept;
  Listener* owner_ = nullptr;
  int slot_ = -1;
  int fd_ = -1;
  Pool* pool_ = nullptr;
  Hello hello_{};
  PassedFds fds_;
};

enum class MatchStatus : uint8_t {
  matched,       // `handshake` holds the connector
  not_fastsock,  // the peer does not run fastsock (or its dialer could not be used)
  error,         // `error` (-errno) and `why`; the connection just stays on TCP
};

struct MatchResult {
  MatchStatus status = MatchStatus::not_fastsock;
  int error = 0;
  const char* why = nullptr;  // for not_fastsock and error
  Handshake handshake;
};

class Listener {
 public:
  struct Options {
    // Connectors' channels held: idle between handshakes, or with a hello read but not
    // matched yet. When full, idle channels are evicted first
    // (their connector dials a new one next time), then the oldest handshake: pass the
    // application's listen() backlog (about 100 bytes per entry, allocated at open()).
    int table_capacity = 128;
    // IPv6 wildcard listener with IPV6_V6ONLY set (its record gets another name).
    bool v6only = false;
    // Without TCP sock_diag: how long match() waits for the wheres of held hellos
    // (wait_for_wheres). A preempted connector sends its where as soon as it runs again:
    // microseconds on one CPU, where this wait is what lets it run. Paid once per hello
    // whose where never comes. (Tests on slow, emulated machines set more.)
    int64_t where_wait_ns = 10'000'000;
  };
  static constexpr int kMaxTableCapacity = 4096;  // fits the epoll tag's slot bits

  Listener() noexcept = default;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener() { close(); }

  // Publishes the record for a TCP listener bound to `local` (its real port, after bind).
  // 0, or -errno with `why`: -EADDRINUSE when another socket already holds the record
  // (e.g. a second SO_REUSEPORT listener), -EINVAL for a bad endpoint or capacity, -ENOMEM.
  int open(const stats::Endpoint& local, const Options& options, const char** why) noexcept;
  int open(const stats::Endpoint& local, const char** why) noexcept {
    return open(local, Options{}, why);
  }

  // The record's listening socket (readable when new channels are waiting), -1 when closed.
  int fd() const noexcept { return record_fd_; }

  // Called after the real TCP accept() returned a connection from `peer` on `local`:
  // returns the fastsock dialer of that connection, or not_fastsock. Never waits: a
  // dialer's hello precedes its SYN. Matched by the dialer's `where` (its local endpoint,
  // sent after its connect); when the accept came first, by the dialer's socket cookie,
  // which sock_diag gives for `peer` (asked only while such a hello is held).
  MatchResult match(const stats::Endpoint& peer, const stats::Endpoint& local) noexcept;
  // The same for a peer socket whose cookie is known (tests).
  MatchResult match(uint64_t peer_cookie) noexcept;

  // Whether other processes may accept on this listener too (it was used after a fork,
  // here or in a parent): a connection accepted without a hello may still be a fastsock
  // dialer's whose hello another process holds (shm_rendezvous_late.hpp).
  bool shared() const noexcept;

  // The record's uid (its name's): a late attach's name says it too.
  uid_t uid() const noexcept { return uid_; }

  // Hellos held in the table (their connections not accepted yet).
  int pending() const noexcept { return pending_; }
  // Connectors' channels held (idle ones included).
  int channels() const noexcept { return used_; }
  const ListenerCounters& counters() const noexcept { return counters_; }

  // Unpublishes the record and closes every channel (their dialers see "gone").
  void close() noexcept;

 private:
  friend class Handshake;
  struct Entry;
  enum class State : uint8_t {
    idle,       // between handshakes
    hello,      // hello read, its connection not accepted yet
    lent,       // matched: a Handshake answers it
  };
  enum class ReadResult : uint8_t { hello, waiting, dropped };
  // What reading one message left: read on, stop (nothing more is expected now), dropped.
  // next: read on; done: nothing more comes before this end replies; resumed: the channel
  // is idle again after a `done` (a withdrawal), so read on after all; dropped.
  enum class Step : uint8_t { next, done, resumed, dropped };
  // The connection match() looks for: its endpoints, and its peer socket's cookie once
  // known (0 before); `why` once sock_diag could not name it.
  struct Want {
    stats::Endpoint peer{};
    stats::Endpoint local{};
    uint64_t cookie = 0;
    const char* why = nullptr;
  };
  // epoll tags: a channel's slot and admission number (an event of a dropped channel
  // must not be taken for the newer one in its slot); the record's is all ones.
  static constexpr uint64_t kRecordTag = UINT64_MAX;
  static constexpr uint64_t kSlotMask = (1u << 13) - 1;  // > kMaxTableCapacity
  static uint64_t event_tag(int slot, uint64_t seq) noexcept {
    return (seq << 13) | uint64_t(slot);
  }
  ReadResult read_channel(Entry& e) noexcept;
  int find_by_cookie(Want& want, bool& asked) noexcept;
  Step take_message(Entry& e, const void* wire, struct Received& r, ReadResult& result) noexcept;
  ReadResult take_hello(Entry& e, const void* wire, struct Received& r) noexcept;
  void set_state(Entry& e, State state) noexcept;
  bool admit(int fd) noexcept;
  void drop(Entry& e, uint64_t ListenerCounters::*counter) noexcept;
  void sweep_closed() noexcept;
  bool identify(Want& want) noexcept;
  int find_hello(const Want& want) const noexcept;
  bool holds_unplaced_hello() const noexcept;
  int wait_for_wheres(const Want& want) noexcept;
  bool take_where(Entry& e, const void* wire, struct Received& r) noexcept;
  bool take_withdraw(Entry& e, const void* wire, struct Received& r) noexcept;
  bool accept_follow_up(Entry& e, struct Received& r, WireError err, bool about_hello,
                        const char* other_hello) noexcept;
  MatchResult match(Want& want) noexcept;
  MatchResult take(Entry& e) noexcept;
  void give_back(int slot, bool reusable) noexcept;
  bool handle_events(int n, const Want& want, int& found) noexcept;
  int adopt_after_fork() noexcept;
  bool was_gone(const Want& want) noexcept;

  // Connectors that closed their channel after their hello (bounded; oldest overwritten):
  // their connection, accepted later, is reported as such.
  struct Gone {
    uint64_t cookie = 0;
    stats::Endpoint where{};  // family 0: its where had not come
  };
  static constexpr int kGoneMemory = 16;
  Gone gone_[kGoneMemory];
  int gone_next_ = 0;

  int record_fd_ = -1;
  int presence_fd_ = -1;  // SOCK_DGRAM under the record's name: what dialers look for
  int epoll_fd_ = -1;     // the record and every channel
  DiagSocket diag_;       // asks the kernel for accepted peers' socket cookies
  pid_t owner_pid_ = 0;   // the process whose channels the table holds
  bool adopted_ = false;  // used in a process forked after open(): the record is shared
  uint64_t fork_era_ = 0;  // fork_era() at open(): a fork since then shares the record
  struct epoll_event* events_ = nullptr;  // capacity_ + 1
  uid_t uid_ = 0;
  uint16_t port_ = 0;
  Entry* table_ = nullptr;
  struct pollfd* pollfds_ = nullptr;  // scratch for ppoll, one per table entry
  int* poll_index_ = nullptr;
  int capacity_ = 0;
  int used_ = 0;     // channels held
  int last_hello_ = -1;  // the table slot that took the latest hello
  int64_t where_wait_ns_ = 0;  // Options::where_wait_ns
  uint64_t where_wait_rounds_ = 0;  // wait_for_wheres calls (Entry::waited_in)
  int pending_ = 0;  // of which with a hello
  uint64_t admitted_ = 0;  // admission sequence: the oldest entry has the smallest
  ListenerCounters counters_;
};

enum class ReplyStatus : uint8_t {
  pending,   // no answer yet: wait for fd() to become readable
  accepted,  // Reply filled; `fds` holds the acceptor's descriptors
  rejected,  // Reply::reason says why
  gone,      // the acceptor closed the connection (or its process died) unanswered
  invalid,   // the answer was malformed (`why`); treat as rejected
};

class Dialer {
 public:
  Dialer() noexcept = default;
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;
  ~Dialer() { close(); }

  // Takes a channel to the listener `dst` would reach, BEFORE the TCP connect: an idle one
  // kept from an earlier handshake of this process, or a new one (non-blocking Unix connect
  // to the record, SO_PEERCRED checked). 0 when a record of this uid was found;
  // -ECONNREFUSED "no fastsock listener"; -EPERM when the record belongs to another uid;
  // -EAGAIN when the record's backlog is full; -EAFNOSUPPORT for a destination that is not
  // IPv4/IPv6; other -errno from socket()/connect(). Never waits. Looks for records through
  // a Unix datagram socket kept per thread (so a dial that finds none creates nothing).
  int dial(const sockaddr* dst, socklen_t dst_len, const char** why) noexcept;

  // The channel's segment pool (shm_pool.hpp), while this Dialer holds the channel (from
  // dial() to the reply); nullptr when it has none. It closes with the channel.
  Pool* pool() const noexcept { return pool_; }
  // What the next hello says about its segment (default: unpooled, slot 0).
  void set_slot(SlotOp op, uint16_t slot) noexcept {
    slot_op_ = op;
    slot_ = slot;
  }

  // After dial(), BEFORE the TCP connect: sends the hello naming the connector's TCP socket
  // by its kernel cookie (socket_cookie(), shm_peer_cookie.hpp) with `count`
  // (<= kMaxPassedFds) descriptors (the caller keeps its own). Never waits: -EAGAIN if the
  // socket buffer is full (cannot happen for the first message), -EPIPE / -ECONNRESET if the
  // listener went away, -ESTALE if the channel was a kept one that its listener closed
  // (dial again: the next kept channel, finally a new one). On failure the channel is
  // closed.
  int send_hello(uint64_t cookie, const int* fds, int count, const char** why) noexcept;
  // How many dials a connection may need: each kept channel of its destination may turn out
  // closed, then a new one.
  static constexpr int kMaxDials = channels_per_destination + 1;
  // After the TCP connect returned 0 or EINPROGRESS: the connection's local endpoint, so
  // that an acceptor that has not accepted it yet matches it without asking sock_diag.
  // Never waits; -errno as send_hello.
  int send_where(const stats::Endpoint& local, const char** why) noexcept;

  // Reads the answer without waiting. After any status but `pending` the channel is no
  // longer this Dialer's (fd() becomes -1): after a well-formed reply (accepted or
  // rejected) it is kept idle for the next connection to this destination, otherwise
  // closed.
  ReplyStatus poll_reply(Reply& reply, PassedFds& fds, const char** why) noexcept;
  // For a reuse of a pooled slot: the acceptor's confirmation in the slot's segment was
  // seen, which is its whole answer (Handshake::accept_in_segment): no reply comes, and
  // the channel is kept idle for the next connection, as after a reply.
  void answered_in_segment() noexcept;

  // A late attach (shm_rendezvous_late.hpp): takes `fd`, a channel to the connector's
  // offer, for one hello and its reply; the channel closes with the Dialer, never kept.
  void adopt_late(int fd, uint16_t server_port) noexcept;

  // The channel to the record: add it to a poll set (POLLIN) to wait for the reply.
  int fd() const noexcept { return fd_; }
  uint64_t nonce() const noexcept { return nonce_; }
  // The port of the destination dialled (0 before dial()).
  uint16_t server_port() const noexcept { return server_port_; }

  // Before the reply was read: closes the channel (the acceptor sees the handshake end)
  // and its pool.
  void close() noexcept;
  // Before the reply was read, when none will come: the acceptor's bytes came on TCP first,
  // so another process accepted the connection (a listener shared after fork) and the
  // hello's holder can never match it. Tells the holder to drop the hello, and keeps the
  // channel and its pool idle for the next connection. True when it did; false when the
  // message could not be sent (the channel is then closed, as by close()).
  bool withdraw() noexcept;

 private:
  void release_channel() noexcept;
  // send_message to the listener, with the credentials its uid check needs.
  int send_to_listener(const void* wire, size_t len, const int* fds, int count) noexcept;
  int fd_ = -1;
  Pool* pool_ = nullptr;
  SlotOp slot_op_ = SlotOp::unpooled;
  uint16_t slot_ = 0;
  pid_t pid_ = 0;  // when dial() ran: the hello's pid
  uid_t uid_ = 0;
  stats::Endpoint destination_{};  // canonical: the channel cache's key
  uint16_t server_port_ = 0;
  uint64_t nonce_ = 0;
  uint64_t cookie_ = 0;  // the hello's
  bool kept_ = false;    // the channel was kept from an earlier handshake
  bool late_ = false;    // a late attach's channel (adopt_late): never kept for another
  int answered_fd_ = -1;  // ... which, answered, stays open until close()
};

}  // namespace fastsock::shm
