// Rendezvous of the shm transport: how a connecting and an accepting process that both run
// fastsock find each other and exchange descriptors, with no service thread, no wait on a
// peer that does not run fastsock, and nothing left in /dev/shm (docs/shm-rendezvous.md).
//
//   acceptor                                   connector
//   Listener::open(local)  (after listen)
//                                              Dialer::dial(dst)          intent, before the SYN
//                                              TCP connect()
//                                              Dialer::send_hello(local, fds)
//   TCP accept() -> peer
//   Listener::match(peer, budget) -> Handshake
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

#include "shm_rendezvous_wire.hpp"
#include "stats_layout.hpp"

namespace fastsock::shm {

class Pool;  // shm_pool.hpp

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

// Counters of one listener, for stats and tests. Every announced connection ends in exactly
// one of matched / dropped_* / rejected_late / evicted / still in the table.
struct ListenerCounters {
  uint64_t channels_opened = 0;    // connectors' channels accepted from the record
  uint64_t channels_closed = 0;    // ... closed by their connector between handshakes
  uint64_t matched = 0;            // match() found the dialer of the accepted connection
  uint64_t not_fastsock = 0;       // match() decided the peer does not run fastsock
  uint64_t budget_expired = 0;     // ... after waiting its whole budget for a silent dialer
  uint64_t waits = 0;              // match() slept (ppoll) for a hello not sent yet,
                                   // having spun for it in vain
  uint64_t dropped_closed = 0;     // dialer closed its channel during a handshake
  uint64_t rejected_late = 0;      // hello of a connection match() had given up on (the
                                   // dialer is told so with a rejecting reply)
  uint64_t dropped_uid = 0;        // credentials of another uid, or pid != the hello's pid
  uint64_t dropped_malformed = 0;  // hello or its control data refused
  uint64_t evicted = 0;            // table full: the oldest idle channel (or, with none,
                                   // the oldest handshake) was dropped
};

class Listener;

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

  void close() noexcept;

 private:
  friend class Listener;
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
    // Connectors' channels held: idle between handshakes, or with a connection announced
    // or its hello read but not matched yet. When full, idle channels are evicted first
    // (their connector dials a new one next time), then the oldest handshake: pass the
    // application's listen() backlog (about 100 bytes per entry, allocated at open()).
    int table_capacity = 128;
    // IPv6 wildcard listener with IPV6_V6ONLY set (its record gets another name).
    bool v6only = false;
  };
  static constexpr int kMaxTableCapacity = 4096;  // fits the epoll tag's slot bits
  static constexpr uint32_t kDefaultBudgetUs = 2000;
  // No spinning by default: on this project's 2-core machines spinning made setup slower
  // (docs/shm-rendezvous.md, "Cost"); worth it only when the dialer has a CPU of its own.
  static constexpr uint32_t kDefaultSpinUs = 0;

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

  // Called after the real TCP accept() returned a connection from `peer`: returns the
  // fastsock dialer of that connection, or not_fastsock. Waits at most `budget_us`
  // microseconds, and only while a channel has announced a connection without sending its
  // hello yet: the first `spin_us` of it polling without sleeping (Config::spin_us), then
  // in epoll_wait.
  MatchResult match(const stats::Endpoint& peer, uint32_t budget_us = kDefaultBudgetUs,
                    uint32_t spin_us = kDefaultSpinUs) noexcept;

  // Announced connections held in the table (hello read or awaited).
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
    announced,  // intent read, hello awaited
    hello,      // hello read, its connection not accepted yet
    lent,       // matched: a Handshake answers it
  };
  enum class ReadResult : uint8_t { hello, waiting, dropped };
  // epoll tags: a channel's slot and admission number (an event of a dropped channel
  // must not be taken for the newer one in its slot); the record's is all ones.
  static constexpr uint64_t kRecordTag = UINT64_MAX;
  static constexpr uint64_t kSlotMask = (1u << 13) - 1;  // > kMaxTableCapacity
  static uint64_t event_tag(int slot, uint64_t seq) noexcept {
    return (seq << 13) | uint64_t(slot);
  }
  ReadResult read_channel(Entry& e) noexcept;
  ReadResult take_hello(Entry& e, const void* wire, struct Received& r) noexcept;
  void set_state(Entry& e, State state) noexcept;
  bool admit(int fd) noexcept;
  void drop(Entry& e, uint64_t ListenerCounters::*counter) noexcept;
  void sweep_closed() noexcept;
  int find_hello(const stats::Endpoint& peer) const noexcept;
  MatchResult take(Entry& e) noexcept;
  void give_back(int slot, bool reusable) noexcept;
  bool handle_events(int n, const stats::Endpoint& want, int& found) noexcept;
  int adopt_after_fork() noexcept;
  MatchResult wait_for_hello(const stats::Endpoint& peer, uint32_t budget_us,
                             uint32_t spin_us) noexcept;

  // Peers whose match() ran out of budget while dialers were silent: if one of those
  // dialers later sends a hello for such a peer, it is answered "rejected" at once rather
  // than left waiting for a reply that would never come. Bounded; oldest overwritten.
  static constexpr int kGivenUpMemory = 16;
  void remember_given_up(const stats::Endpoint& peer) noexcept;
  bool forget_given_up(const stats::Endpoint& peer) noexcept;
  stats::Endpoint given_up_[kGivenUpMemory] = {};
  int given_up_next_ = 0;

  int record_fd_ = -1;
  int presence_fd_ = -1;  // SOCK_DGRAM under the record's name: what dialers look for
  int epoll_fd_ = -1;     // the record and every channel
  pid_t owner_pid_ = 0;   // the process whose channels the table holds
  struct epoll_event* events_ = nullptr;  // capacity_ + 1
  uid_t uid_ = 0;
  uint16_t port_ = 0;
  Entry* table_ = nullptr;
  struct pollfd* pollfds_ = nullptr;  // scratch for ppoll, one per table entry
  int* poll_index_ = nullptr;
  int capacity_ = 0;
  int used_ = 0;     // channels held
  int pending_ = 0;  // of which announced or with a hello
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

  // Announces a connection to the listener `dst` would reach, BEFORE the TCP connect: sends
  // the intent on an idle channel kept from an earlier handshake of this process (one
  // whose listener closed or restarted fails at once and is closed), or on a new channel
  // (non-blocking Unix connect to the record, SO_PEERCRED checked). 0 when a record of
  // this uid was found; -ECONNREFUSED "no fastsock listener"; -EPERM when the record
  // belongs to another uid (nothing is sent to it); -EAGAIN when the record's backlog is
  // full; -EAFNOSUPPORT for a destination that is not IPv4/IPv6; other -errno from
  // socket()/connect()/sendmsg(). Never waits. Looks for records through a Unix datagram
  // socket kept per thread (so a dial that finds none creates nothing).
  int dial(const sockaddr* dst, socklen_t dst_len, const char** why) noexcept;

  // The channel's segment pool (shm_pool.hpp), while this Dialer holds the channel (from
  // dial() to the reply); nullptr when it has none. It closes with the channel.
  Pool* pool() const noexcept { return pool_; }
  // What the next hello says about its segment (default: unpooled, slot 0).
  void set_slot(SlotOp op, uint16_t slot) noexcept {
    slot_op_ = op;
    slot_ = slot;
  }

  // After the TCP connect returned 0 or EINPROGRESS: sends the hello with the connector's
  // local endpoint and `count` (<= kMaxPassedFds) descriptors (the caller keeps its own).
  // Never waits: -EAGAIN if the socket buffer is full (cannot happen for the first
  // message), -EPIPE / -ECONNRESET if the listener went away.
  int send_hello(const stats::Endpoint& local, const int* fds, int count,
                 const char** why) noexcept;

  // Reads the answer without waiting. After any status but `pending` the channel is no
  // longer this Dialer's (fd() becomes -1): after a well-formed reply (accepted or
  // rejected) it is kept idle for the next connection to this destination, otherwise
  // closed.
  ReplyStatus poll_reply(Reply& reply, PassedFds& fds, const char** why) noexcept;

  // The channel to the record: add it to a poll set (POLLIN) to wait for the reply.
  int fd() const noexcept { return fd_; }
  uint64_t nonce() const noexcept { return nonce_; }
  // The port of the destination dialled (0 before dial()).
  uint16_t server_port() const noexcept { return server_port_; }

  // Before the reply was read: closes the channel (the acceptor sees the handshake end)
  // and its pool.
  void close() noexcept;

 private:
  int fd_ = -1;
  Pool* pool_ = nullptr;
  SlotOp slot_op_ = SlotOp::unpooled;
  uint16_t slot_ = 0;
  pid_t pid_ = 0;  // when dial() ran: the hello's pid
  uid_t uid_ = 0;
  stats::Endpoint destination_{};  // canonical: the channel cache's key
  uint16_t server_port_ = 0;
  uint64_t nonce_ = 0;
};

}  // namespace fastsock::shm
