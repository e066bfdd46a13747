// The transport interface and its registry (design §2).
//
// A transport is one object behind this interface, registered as an entry
// {id, name, rank, probe, instance}. The core walks the configured failover chain and asks
// each registered transport, in order, to take a connection; kernel TCP is the last link
// and always accepts. Nothing outside transports/<x>/ or shm/ names a concrete transport.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>

#include "transport_id.hpp"

namespace fastsock {

struct Socket;

// Whether a transport can be used on this host at all, and if not, why (one sentence).
struct Probe {
  bool available = false;
  char reason[400] = {};  // the vendor link names each of its profiles
  // What a connection's reason says when the link is unusable, when `reason` is too long
  // for a stats slot (the vendor link's list of profiles); empty: `reason`.
  char brief[64] = {};
};

// The side of the connection the core is asking about.
enum class Side : uint8_t { client, server };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportId id() const noexcept = 0;

  // Called after a successful listen(): a transport may publish a rendezvous record or
  // listen on its own fabric. Returns 0 or -errno; failure only means no upgrades.
  virtual int on_listen(Socket& s) noexcept = 0;
  // The listening socket closes: release what on_listen published.
  virtual void close_listener(Socket& s) noexcept = 0;

  // Called by connect() before the kernel connection is attempted (before the SYN), for
  // every usable link of the chain that the rules allow for this destination: a link that
  // must be findable by the acceptor before the connection exists prepares it here.
  // `first`: this link is the first the chain will try to attach, so its attach() runs
  // whenever the connect succeeds (a link that commits to the peer here needs that).
  virtual void prepare_connect(Socket& s, const sockaddr* dst, socklen_t len,
                               bool first) noexcept = 0;

  // Called once the kernel connection exists (after connect() or accept()). Returns 0 when
  // this transport now carries the connection; otherwise writes why into `why` (one short
  // clause) and returns -errno, and the core tries the next link. For an accepted
  // connection, `listener` is the listening socket's Socket (else nullptr).
  virtual int attach(Socket& s, Side side, Socket* listener, char* why,
                     size_t why_len) noexcept = 0;
  // Whether the connection is reported on this link (stats, log) as soon as it attached.
  // A link whose own connection is made after attach and may never come (vendor) says
  // no: the connection is reported on tcp until the link really carries it.
  virtual bool carries_at_attach() const noexcept { return true; }
  // Brings the connection's stats slot up to date (the link it is on, or why not) before
  // the application asks (fastsock_transport): a link whose state changes between data
  // calls (verbs: the RDMA connection comes up) records it at the next call otherwise.
  virtual void refresh_report(Socket& s) noexcept { (void)s; }
  // Called once the connection's first log line ("client ... on X") is out, which names
  // the link as attach left it: a link that reports a later change itself starts here.
  virtual void on_tracked(Socket& s) noexcept { (void)s; }

  // True when the kernel socket itself carries the data: the core then calls the real libc
  // entry point the application called, unchanged, so every flag keeps the kernel's meaning.
  // Everything below is only called for links that return false.
  virtual bool kernel_carries_data() const noexcept = 0;

  // Byte ranges. `fd` is the application's descriptor the call came through. They keep the
  // kernel's semantics for a TCP socket: blocking unless MSG_DONTWAIT or O_NONBLOCK (which
  // the link reads from the kernel fd when it would block), SO_RCVTIMEO/SO_SNDTIMEO, EINTR,
  // MSG_PEEK, MSG_WAITALL, EOF as 0, EPIPE after shutdown (the core raises SIGPIPE).
  // Return bytes moved or -errno. Not noexcept: a blocking call is a cancellation point,
  // and pthread_cancel unwinds through it (see src/ops.hpp).
  virtual ssize_t send(Socket& s, int fd, const struct iovec* iov, int iovcnt, int flags) = 0;
  virtual ssize_t recv(Socket& s, int fd, const struct iovec* iov, int iovcnt, int flags) = 0;
  // FIONREAD: bytes a recv() would return now, or -errno.
  virtual long bytes_readable(Socket& s, int fd) noexcept = 0;

  // Readiness as poll() reports it (POLLIN, POLLOUT, POLLHUP, POLLRDHUP, POLLERR) for the
  // `events` asked, computed now without sleeping.
  virtual short poll_now(Socket& s, int fd, short events) noexcept = 0;
  // Before a poll() that may sleep: arms the link's notification for `events` and writes the
  // kernel descriptors whose readiness wakes the sleeper into `out` (at most
  // kMaxWaitFds). After waking, the core calls poll_now() again, then disarm().
  static constexpr int kMaxWaitFds = 3;
  virtual int wait_fds(Socket& s, int fd, short events, struct pollfd* out) noexcept = 0;
  // How the caller watches the wake descriptors: a level-triggered watch (poll) needs
  // them drained, or it wakes again at once; an edge-triggered one (the library's epoll
  // registrations) is woken by the next signal whatever is left, so a link may skip
  // draining what no peer announced (a system call saved per arming).
  enum class WakeWatch : uint8_t { level, edge };
  virtual void disarm(Socket& s, WakeWatch watch) noexcept = 0;
  // When poll_now's answer for `events` may change with no wake descriptor firing
  // (CLOCK_MONOTONIC ns, 0: not expected): a sleeping poll or epoll wait wakes by then and
  // asks again. shm: a wait for room in a ring whose reader has stopped taking bytes, which
  // moves to TCP after a while (the stalled-ring rule). `timed_waits` counts connections
  // that may answer non-zero, so that epoll looks only while there are any.
  virtual int64_t recheck_at(Socket& s, short events) noexcept {
    (void)s, (void)events;
    return 0;
  }
  static inline std::atomic<int> timed_waits{0};
  // Whether the peer last waited on the CPU this thread runs on: a poll() that would spin
  // on such a connection yields the CPU instead (the peer cannot answer while it spins).
  virtual bool peer_shares_cpu(Socket& s) noexcept = 0;

  // setsockopt() succeeded on the kernel socket (which keeps every option's state).
  virtual void option_set(Socket& s, int level, int name, const void* value,
                          socklen_t len) noexcept = 0;

  // The element type of a typed array call (include/fastsock/fastsock.h), for a link that
  // carries it out of band. A send announces its `bytes` (begin); a receive expects `type`
  // for its next `bytes` (begin) until the step ends (!begin), and its reads then fail with
  // -EBADMSG, taking nothing, where the sender announced another type. Returns 0 or
  // -errno. Links that cannot carry it (kernel TCP: the peer may not even run fastsock)
  // keep this default.
  virtual int typed(Socket& s, bool begin, bool sending, int type, uint64_t bytes) noexcept {
    (void)s, (void)begin, (void)sending, (void)type, (void)bytes;
    return 0;
  }

  // Hands the connection back to the kernel for good, without losing or duplicating a
  // byte (design §3), because this process is about to do something the link cannot
  // follow: fork, exec, fdopen (stdio reads and writes inside glibc), passing the
  // descriptor to another process. No-op for a link the kernel carries.
  virtual void downgrade(Socket& s, int fd, const char* why) noexcept = 0;

  // exec into a program that runs the library too (src/exec_handover.hpp): the connection
  // may continue there instead of being downgraded. A link that can hand it over writes
  // what the new image needs into `out` (printable; no ';' or '/'), makes the descriptors it
  // names inheritable, holds the connection still until exec_failed() (or until the image
  // is gone), and returns the length written. 0: the core downgrades the connection.
  virtual size_t exec_handover(Socket& s, int fd, char* out, size_t cap) noexcept {
    (void)s, (void)fd, (void)out, (void)cap;
    return 0;
  }
  // The exec returned (it failed): the connection goes on in this image as before.
  virtual void exec_failed(Socket& s) noexcept { (void)s; }
  // In the new image: takes over the connection from the token exec_handover wrote (into
  // Socket::link_state). 0, or -errno with `why` (the core then shuts the socket down: the
  // peer must not wait for bytes nobody will send).
  virtual int adopt(Socket& s, int fd, const char* token, char* why, size_t why_len) noexcept {
    (void)s, (void)fd, (void)token;
    snprintf(why, why_len, "this link cannot continue a connection over exec");
    return -ENOTSUP;
  }

  virtual int shutdown(Socket& s, int fd, int how) noexcept = 0;
  // The last descriptor of the connection is closing: release per-connection resources.
  virtual void detach(Socket& s) noexcept = 0;
};

// The one instance of link type T, made on first use (for TransportEntry::instance). Never
// destroyed: connections still open at exit are closed by exit handlers, which run after
// the destructors of statics made before them were registered (a connection adopted over
// exec makes its link's instance after the stats' exit handler: "pure virtual method
// called" at cat's exit under ASan).
template <typename T>
Transport& the_instance() noexcept {
  alignas(T) static unsigned char storage[sizeof(T)];
  static T* const instance = new (storage) T;
  return *instance;
}

struct TransportEntry {
  TransportId id;
  int rank;                       // lower is preferred when chains are ordered by rank
  Probe (*probe)() noexcept;      // cheap; may be called by `fastsock info` and once per process
  Transport& (*instance)() noexcept;
};

// The registered entry for `id`, or nullptr when this build does not include it.
const TransportEntry* find_transport(TransportId id) noexcept;

// Why a transport that is not registered is missing, for `fastsock info` and stats.
const char* missing_transport_reason(TransportId id) noexcept;

}  // namespace fastsock
