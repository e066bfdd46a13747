// One connection's shared-memory segment: create (connector) or attach (acceptor).
//
// The segment is a memfd sized to the header plus two rings at their maximum window, sealed
// against shrinking and growing (so the peer cannot make our mapping SIGBUS by truncating
// it), and mapped MAP_SHARED. Only the header page and the two initial windows are touched
// (and prefaulted) at creation; the rest stays sparse until a ring grows.
//
// The object keeps a private copy of the validated limits: nothing it hands out depends on
// a value re-read from shared memory. It owns the mapping and the memfd; the memfd can be
// closed early with close_fd() once it has been passed to the peer.
//
// System calls: memfd_create, ftruncate, fcntl (raw syscall: fcntl is hooked by the
// library), fstat, mmap, madvise, munmap, close (raw syscall: close is hooked).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shm_layout.hpp"

namespace fastsock::shm {

inline constexpr const char* kSegmentName = "fastsock-shm";
inline constexpr const char* kPooledSegmentName = "fastsock-shm-pool";

// Ring window sizes, chosen by the caller (the configuration). Both powers of two,
// kMinWindow <= initial_window <= max_window <= kMaxWindowLimit.
struct Limits {
  uint32_t initial_window = kDefaultInitialWindow;
  uint32_t max_window = kDefaultMaxWindow;
};

// Outcome of create/attach: err is 0 or a positive errno; reason is a static string that
// says what was wrong (for the "why not shm" record), never null.
struct Status {
  int err = 0;
  const char* reason = "ok";
  bool ok() const { return err == 0; }
};

// Checks a Limits value; the reason names the first rule it breaks.
Status validate_limits(const Limits& limits);

// Bytes of the memfd for these limits: kHeaderBytes + 2 * max_window.
uint64_t segment_bytes(const Limits& limits);

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Connector: a new memfd (MFD_CLOEXEC | MFD_ALLOW_SEALING), sized, sealed, mapped, header
  // written, header page and initial windows prefaulted. On failure the object stays empty.
  // `name` is the memfd's (/proc/PID/maps shows "/memfd:<name>" in both processes): pooled
  // segments are told apart by theirs (kPooledSegmentName).
  Status create(const Limits& limits, const char* name = kSegmentName);

  // Connector, on a pooled segment whose both ends released it (shm_pool.hpp): rewrites
  // the whole layout to exactly what create() leaves in a fresh memfd (zeros, plus the
  // header line, the geometry words and the switch offsets), so that nothing of the
  // previous connection's state (counters, flags, marks, the release mark) survives. The
  // ring bytes are not cleared: only bytes between the new counters are ever read.
  void reset_layout();

  // Acceptor: takes ownership of `fd` (closed on failure too) and validates it: a sealed
  // regular file whose size, magic, version, header size, windows and ring offsets are
  // consistent, with max_window no larger than `acceptable.max_window` (the acceptor's own
  // memory cap). The ring windows are not validated here (they are live values); the rings
  // check them on every use.
  Status attach(int fd, const Limits& acceptable = Limits{});

  bool valid() const { return base_ != nullptr; }
  // The memfd (to pass with SCM_RIGHTS), or -1 once closed.
  int fd() const { return fd_; }
  void close_fd();
  // A memfd kept open (to continue over exec) is one of the library's descriptors: `take`
  // gives it its number and registers it (internal_fds::take), `forget` is told before it
  // closes (internal_fds::remove). Without them (the shm core's own tests) nothing is told.
  using TakeFd = int (*)(int) noexcept;
  using ForgetFd = void (*)(int) noexcept;
  void keep_fd(TakeFd take, ForgetFd forget) {
    if (fd_ < 0) return;
    fd_ = take(fd_);
    forget_fd_ = forget;
  }

  // Validated at create/attach time, private copies.
  const Limits& limits() const { return limits_; }
  uint64_t size() const { return size_; }
  Layout* layout() const { return reinterpret_cast<Layout*>(base_); }
  // Start of the ring data of direction d (0 or 1): max_window bytes.
  unsigned char* ring_data(int d) const;

  // Prefaults [offset, offset + bytes) of direction d's ring data so that a later store
  // cannot fault on memory exhaustion. Returns 0 or -errno (-ENOMEM: do not grow).
  int prefault(int d, uint64_t offset, uint64_t bytes) const;

  // Local trust flag (never read from shared memory): set by the caller when the peer end
  // is known to live in this same process (threads over loopback). It lets a handoff use
  // memcpy instead of process_vm_readv. Cleared by default.
  void set_peer_in_this_process(bool same) { peer_in_this_process_ = same; }
  bool peer_in_this_process() const { return peer_in_this_process_; }

 private:
  void reset();
  void write_fresh_layout();

  int fd_ = -1;
  ForgetFd forget_fd_ = nullptr;  // keep_fd
  unsigned char* base_ = nullptr;
  uint64_t size_ = 0;
  Limits limits_{};
  bool peer_in_this_process_ = false;
};

}  // namespace fastsock::shm
