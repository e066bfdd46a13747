// Segment creation and validation (shm_segment.hpp).
#include "shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "shm_process.hpp"
#include "shm_sys.hpp"

namespace fastsock::shm {

namespace {

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;

Status fail(int err, const char* reason) { return Status{err, reason}; }

}  // namespace

Status validate_limits(const Limits& limits) {
  if (!power_of_two(limits.initial_window) || !power_of_two(limits.max_window))
    return fail(EINVAL, "ring windows must be powers of two");
  if (limits.initial_window < kMinWindow) return fail(EINVAL, "initial ring window below 4 KiB");
  if (limits.max_window < limits.initial_window)
    return fail(EINVAL, "maximum ring window below the initial window");
  if (limits.max_window > kMaxWindowLimit) return fail(EINVAL, "maximum ring window above 64 MiB");
  return {};
}

uint64_t segment_bytes(const Limits& limits) {
  return uint64_t{kHeaderBytes} + 2 * uint64_t{limits.max_window};
}

Segment::~Segment() { reset(); }

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    forget_fd_ = std::exchange(other.forget_fd_, nullptr);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    limits_ = other.limits_;
    peer_in_this_process_ = std::exchange(other.peer_in_this_process_, false);
  }
  return *this;
}

void Segment::reset() {
  if (base_) ::munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
  close_fd();
  peer_in_this_process_ = false;
}

void Segment::close_fd() {
  if (fd_ >= 0) {
    if (forget_fd_) forget_fd_(fd_);  // first: once closed, the number may be reused at once
    sys::close(fd_);
  }
  fd_ = -1;
  forget_fd_ = nullptr;
}

unsigned char* Segment::ring_data(int d) const {
  return base_ + kHeaderBytes + uint64_t(d & 1) * limits_.max_window;
}

int Segment::prefault(int d, uint64_t offset, uint64_t bytes) const {
  if (!base_ || offset > limits_.max_window || bytes > limits_.max_window - offset) return -EINVAL;
  if (bytes == 0) return 0;
  // MADV_POPULATE_WRITE (Linux 5.14) allocates the pages now and reports ENOMEM instead of
  // leaving a later store to fault. Older kernels answer EINVAL: then the pages are
  // allocated on first touch, as for any shared memory.
  if (::madvise(ring_data(d) + offset, bytes, MADV_POPULATE_WRITE) == 0) return 0;
  return errno == EINVAL ? 0 : -errno;
}

Status Segment::create(const Limits& limits, const char* name) {
  reset();
  if (Status s = validate_limits(limits); !s.ok()) return s;
  const uint64_t bytes = segment_bytes(limits);
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail(errno, "memfd_create failed");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    sys::close(fd);
    return fail(err, "ftruncate of the segment failed");
  }
  if (sys::fcntl(fd, F_ADD_SEALS, kRequiredSeals | F_SEAL_SEAL) != 0) {
    int err = errno;
    sys::close(fd);
    return fail(err, "sealing the segment failed");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    sys::close(fd);
    return fail(err, "mmap of the segment failed");
  }
  fd_ = fd;
  base_ = static_cast<unsigned char*>(p);
  size_ = bytes;
  limits_ = limits;
  // The pages a connection touches from its start are allocated now, so that no memory
  // shortage can surface later as a SIGBUS on a store (see prefault). Ring 0 follows the
  // header: one call covers both, one more covers ring 1.
  if (::madvise(base_, kHeaderBytes + limits.initial_window, MADV_POPULATE_WRITE) != 0 &&
      errno != EINVAL) {
    int err = errno;
    reset();
    return fail(err, "no memory for the segment header and the first ring window");
  }
  if (int rc = prefault(1, 0, limits.initial_window); rc != 0) {
    reset();
    return fail(-rc, "no memory for the initial ring windows");
  }

  write_fresh_layout();
  return {};
}

void Segment::write_fresh_layout() {
  // A fresh memfd reads as zeros: counters, flags, lock words and handoff slots start at 0
  // (DirectionState::active, no handoff). Only the non-zero fields are set.
  Layout* l = layout();
  for (int d = 0; d < 2; ++d) {
    l->dir[d].producer.geometry.store(
        encode_geometry(limits_.initial_window, limits_.initial_window, 0), std::memory_order_relaxed);
    l->dir[d].producer.switch_offset.store(kNoSwitchOffset, std::memory_order_relaxed);
  }
  SegmentHeader& h = l->header;
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.segment_bytes = size_;
  h.initial_window = limits_.initial_window;
  h.max_window = limits_.max_window;
  h.ring_offset[0] = kHeaderBytes;
  h.ring_offset[1] = uint64_t{kHeaderBytes} + limits_.max_window;
  h.creator_pid = static_cast<int32_t>(current_pid());
  // The magic last: a header with the magic is complete (the peer maps the memfd only after
  // receiving it over a socket, which orders these stores anyway).
  std::atomic_thread_fence(std::memory_order_release);
  h.magic = kMagic;
}

void Segment::reset_layout() {
  if (!base_) return;
  // The peer does not use the segment now (both ends released it); plain stores suffice,
  // and the hello that follows (a socket message) orders them before the peer's loads.
  // The CPU hints stay: the same two processes use the slot next (shm_pool.hpp), most
  // likely where they ran before, and a waiter that knows the peer's CPU spins wisely.
  Layout* layout = reinterpret_cast<Layout*>(base_);
  const uint32_t cpus[2] = {layout->side[0].cpu.load(std::memory_order_relaxed),
                            layout->side[1].cpu.load(std::memory_order_relaxed)};
  std::memset(base_, 0, sizeof(Layout));
  write_fresh_layout();
  layout->side[0].cpu.store(cpus[0], std::memory_order_relaxed);
  layout->side[1].cpu.store(cpus[1], std::memory_order_relaxed);
}

Status Segment::attach(int fd, const Limits& acceptable) {
  reset();
  if (fd < 0) return fail(EBADF, "no segment descriptor");
  fd_ = fd;
  Limits cap = acceptable;
  if (!power_of_two(cap.max_window) || cap.max_window > kMaxWindowLimit) cap.max_window = kMaxWindowLimit;

  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    reset();
    return fail(err, "fstat of the segment failed");
  }
  if (!S_ISREG(st.st_mode)) {
    reset();
    return fail(EINVAL, "segment is not a regular file");
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kHeaderBytes + 2 * uint64_t{kMinWindow} ||
      file_bytes > kHeaderBytes + 2 * uint64_t{cap.max_window}) {
    reset();
    return fail(EINVAL, "segment size out of range");
  }
  // Without these seals the peer could shrink the file and make our accesses SIGBUS.
  int seals = sys::fcntl(fd, F_GET_SEALS, 0);
  if (seals < 0 || (seals & kRequiredSeals) != kRequiredSeals) {
    reset();
    return fail(EPERM, "segment is not sealed against resizing");
  }
  void* p = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    reset();
    return fail(err, "mmap of the segment failed");
  }
  base_ = static_cast<unsigned char*>(p);
  size_ = file_bytes;

  // One private snapshot of the header; every check and every later use reads the copy.
  SegmentHeader h;
  std::memcpy(&h, base_, sizeof h);
  const char* why = nullptr;
  if (h.magic != kMagic) why = "bad segment magic";
  else if (h.version != kVersion) why = "unsupported segment version";
  else if (h.header_bytes != kHeaderBytes) why = "bad segment header size";
  else if (!power_of_two(h.max_window) || h.max_window < kMinWindow || h.max_window > cap.max_window)
    why = "segment maximum window invalid or above the accepted limit";
  else if (!power_of_two(h.initial_window) || h.initial_window < kMinWindow ||
           h.initial_window > h.max_window)
    why = "segment initial window invalid";
  else if (h.segment_bytes != segment_bytes(Limits{h.initial_window, h.max_window}) ||
           h.segment_bytes != file_bytes)
    why = "segment size does not match its header";
  else if (h.ring_offset[0] != kHeaderBytes ||
           h.ring_offset[1] != uint64_t{kHeaderBytes} + h.max_window)
    why = "segment ring offsets invalid";
  if (why) {
    reset();
    return fail(EINVAL, why);
  }
  limits_ = Limits{h.initial_window, h.max_window};
  return {};
}

}  // namespace fastsock::shm
