// Layout of one shm connection segment (docs/shm.md has the picture).
//
// A segment is a sealed memfd mapped MAP_SHARED by the two ends of one connection: side 0 is
// the connector, side 1 the acceptor. Direction d carries the bytes that side d sends. The
// file holds, at fixed offsets:
//
//   [0, kHeaderBytes)                          Layout below (one page; only 704 bytes used)
//   [ring_offset[0], ring_offset[0] + max)     ring data of direction 0
//   [ring_offset[1], ring_offset[1] + max)     ring data of direction 1
//
// where max = max_window and ring_offset[d] = kHeaderBytes + d * max_window. The rings use
// only their first `window` bytes; the memfd is sparse, so an idle connection touches the
// header page and two initial windows, nothing more.
//
// Every field is read as untrusted by the other side. Fields are grouped by writer into
// 64-byte lines so that the producer's and consumer's hot counters never share a line.
// Offsets are fixed by the static_asserts below; bump kVersion on any change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fastsock::shm {

inline constexpr uint64_t kMagic = 0x6d68'736b'636f'7366ull;  // "fsockshm" little-endian
// 2: SideLine::cpu; ring geometry (growth when not empty). 3: typed marks. 4: SideLine::
// released (pooled segments).
inline constexpr uint32_t kVersion = 4;
inline constexpr uint32_t kHeaderBytes = 4096;         // the layout, padded to one page
inline constexpr uint32_t kMinWindow = 4096;           // smallest ring window (one page)
inline constexpr uint32_t kMaxWindowLimit = 64u << 20; // largest max_window attach accepts
inline constexpr uint32_t kDefaultInitialWindow = 16u << 10;
inline constexpr uint32_t kDefaultMaxWindow = 1u << 20;
// switch_offset before the producer has set it.
inline constexpr uint64_t kNoSwitchOffset = ~uint64_t{0};

// Line 0: written once by the creator before the memfd is passed on; immutable after.
struct alignas(64) SegmentHeader {
  uint64_t magic;            // kMagic
  uint32_t version;          // kVersion
  uint32_t header_bytes;     // kHeaderBytes
  uint64_t segment_bytes;    // header_bytes + 2 * max_window (== the memfd's size)
  uint32_t initial_window;   // power of two, kMinWindow <= initial <= max
  uint32_t max_window;       // power of two, <= kMaxWindowLimit
  uint64_t ring_offset[2];   // header_bytes + d * max_window
  int32_t creator_pid;       // informational (logs); never trusted for anything
  uint32_t reserved0;
  uint64_t reserved1;
};
static_assert(offsetof(SegmentHeader, magic) == 0);
static_assert(offsetof(SegmentHeader, version) == 8);
static_assert(offsetof(SegmentHeader, header_bytes) == 12);
static_assert(offsetof(SegmentHeader, segment_bytes) == 16);
static_assert(offsetof(SegmentHeader, initial_window) == 24);
static_assert(offsetof(SegmentHeader, max_window) == 28);
static_assert(offsetof(SegmentHeader, ring_offset) == 32);
static_assert(offsetof(SegmentHeader, creator_pid) == 48);
static_assert(sizeof(SegmentHeader) == 64);

// Where the ring's bytes are (shm_ring.hpp, "the window grows"): bytes from `grown_at` on
// sit at their counter modulo `window`, bytes before it modulo `previous` (the window before
// the last growth). One 64-bit word, so that a reader never sees half of a change:
//   bits  0..4   log2(window) - 12          (4 KiB .. 64 MiB)
//   bits  5..9   log2(previous) - 12
//   bits 10..63  grown_at modulo 2^54: the full counter is the largest one <= tail with
//                these low bits (the producer collapses previous into window long before
//                a stream gets 2^54 bytes past its last growth)
inline constexpr int kGeometryCounterShift = 10;
inline constexpr uint64_t kGeometryCounterMask = (uint64_t{1} << (64 - kGeometryCounterShift)) - 1;

constexpr uint32_t log2_of(uint32_t power_of_two) {
  uint32_t n = 0;
  while ((uint32_t{1} << n) < power_of_two) ++n;
  return n;
}

constexpr uint64_t encode_geometry(uint32_t window, uint32_t previous, uint64_t grown_at) {
  return (uint64_t(log2_of(window) - 12)) | (uint64_t(log2_of(previous) - 12) << 5) |
         ((grown_at & kGeometryCounterMask) << kGeometryCounterShift);
}
static_assert(encode_geometry(4096, 4096, 0) == 0);

// Written by the producer of one direction.
struct alignas(64) ProducerLine {
  std::atomic<uint64_t> tail;           // ring bytes ever written (release)
  std::atomic<uint64_t> geometry;       // see encode_geometry; changes before the tail that uses it
  std::atomic<uint32_t> fin;            // 1 after close_write(): no byte follows `tail`
  std::atomic<uint32_t> lock;           // reserved: producer lock for processes sharing it after fork
  std::atomic<uint64_t> switch_offset;  // TCP bytes sent before the first shm byte, or kNoSwitchOffset
};
static_assert(offsetof(ProducerLine, tail) == 0);
static_assert(offsetof(ProducerLine, geometry) == 8);
static_assert(offsetof(ProducerLine, fin) == 16);
static_assert(offsetof(ProducerLine, lock) == 20);
static_assert(offsetof(ProducerLine, switch_offset) == 24);
static_assert(sizeof(ProducerLine) == 64);

// Written by the consumer of one direction.
struct alignas(64) ConsumerLine {
  std::atomic<uint64_t> head;         // ring bytes ever consumed (release)
  std::atomic<uint64_t> consumed;     // stream bytes consumed on shm: ring + handoff (release)
  std::atomic<uint32_t> read_closed;  // 1 after close_read(): the producer's bytes go nowhere
  std::atomic<uint32_t> lock;         // reserved: consumer lock for processes sharing it after fork
};
static_assert(offsetof(ConsumerLine, head) == 0);
static_assert(offsetof(ConsumerLine, consumed) == 8);
static_assert(offsetof(ConsumerLine, read_closed) == 16);
static_assert(offsetof(ConsumerLine, lock) == 20);
static_assert(sizeof(ConsumerLine) == 64);

// State of one direction, written by whichever end runs the switch protocol (src/).
// active: bytes flow on the ring. downgrade_requested (set by the consumer): it can no
// longer read the ring; the producer resends what it did not consume on TCP and continues
// there. tcp_resumed (set by the producer after its last ring byte): the stream continues on
// TCP once the ring is empty. dead: unusable.
enum class DirectionState : uint32_t {
  active = 0,
  downgrade_requested = 1,
  dead = 2,
  tcp_resumed = 3,
};
inline constexpr uint32_t kMaxDirectionState = uint32_t(DirectionState::tcp_resumed);

struct alignas(64) ControlLine {
  std::atomic<uint32_t> state;  // DirectionState
  uint32_t reserved[15];
};
static_assert(sizeof(ControlLine) == 64);

// The handoff descriptor of one direction (shm_handoff.hpp). At most one is outstanding.
//
// `ctl` packs, so that the consumer's progress and the producer's cancel are one CAS:
//   bits  0..7   HandoffState
//   bits  8..23  sequence number of the post (16 bits, wraps)
//   bits 24..63  progress: bytes the consumer has copied (40 bits)
// The other fields are written by the producer before it publishes ctl = posted (release)
// and are not changed while the post is outstanding; the consumer reads them seqlock-style
// (ctl, fields, acquire fence, ctl again) because a late reader may meet the next post's.
struct alignas(64) HandoffSlot {
  std::atomic<uint64_t> ctl;
  std::atomic<int32_t> pid;        // the producer's process (process_vm_readv target)
  uint32_t reserved0;
  std::atomic<uint64_t> address;   // start of the producer's buffer, in its address space
  std::atomic<uint64_t> length;    // bytes, 1 .. kMaxHandoffLength
  std::atomic<uint64_t> position;  // ring tail when posted: the bytes follow ring byte position - 1
  uint64_t reserved1[3];
};
static_assert(offsetof(HandoffSlot, ctl) == 0);
static_assert(offsetof(HandoffSlot, pid) == 8);
static_assert(offsetof(HandoffSlot, address) == 16);
static_assert(offsetof(HandoffSlot, length) == 24);
static_assert(offsetof(HandoffSlot, position) == 32);
static_assert(sizeof(HandoffSlot) == 64);

// Everything about one direction: 4 lines.
struct Direction {
  ProducerLine producer;
  ConsumerLine consumer;
  ControlLine control;
  HandoffSlot handoff;
};
static_assert(offsetof(Direction, producer) == 0);
static_assert(offsetof(Direction, consumer) == 64);
static_assert(offsetof(Direction, control) == 128);
static_assert(offsetof(Direction, handoff) == 192);
static_assert(sizeof(Direction) == 256);

// Arm flag bit (shm_notify.hpp): signal once, then the flag clears itself. Other bits
// mean nothing.
inline constexpr uint32_t kArmOnce = 1;

// Written by side s to tell the peer when to signal s's eventfd.
struct alignas(64) SideLine {
  std::atomic<uint32_t> arm_data;   // s waits for bytes in direction 1 - s
  std::atomic<uint32_t> arm_space;  // s waits for free space in direction s
  std::atomic<uint32_t> pending;    // 1: s's eventfd has been signalled and not drained yet
  // 1 + the CPU s last started waiting on (0: not known yet). A scheduling hint for the
  // peer's spin (shm_notify.hpp); any value is harmless.
  std::atomic<uint32_t> cpu;
  // A pooled segment (shm_pool.hpp), side 1's line only: kSlotReleased once the acceptor's
  // connection let go of it (the connector may then reuse it for its next connection),
  // kSlotRetired when the acceptor will never use it again. 0 while in use. The connector
  // trusts it only together with its own reference count, and resets it on reuse.
  std::atomic<uint32_t> released;
  uint32_t reserved[11];
};
inline constexpr uint32_t kSlotInUse = 0;
inline constexpr uint32_t kSlotReleased = 1;
inline constexpr uint32_t kSlotRetired = 2;
static_assert(offsetof(SideLine, arm_data) == 0);
static_assert(offsetof(SideLine, arm_space) == 4);
static_assert(offsetof(SideLine, pending) == 8);
static_assert(offsetof(SideLine, cpu) == 12);
static_assert(offsetof(SideLine, released) == 16);
static_assert(sizeof(SideLine) == 64);

// The typed marks of one direction (the typed API's element type, out of band): its
// producer records the shm stream range (ring plus handoff bytes) and element type of each
// typed send, round robin over kTypeMarks entries, under a seqlock (`seq` odd while it
// writes). A consumer's typed receive compares its type with the marks over the bytes it is
// about to take. Only a hint: a reader that races the writer, or that the writer ran more
// than kTypeMarks sends ahead of, checks nothing; garbage at worst fails a typed receive,
// and never changes what the stream delivers.
inline constexpr int kTypeMarks = 32;
struct TypeMark {
  std::atomic<uint64_t> start;
  std::atomic<uint64_t> end;
  std::atomic<uint32_t> type;  // 0: unused
  uint32_t reserved;
};
static_assert(sizeof(TypeMark) == 24);
struct alignas(64) TypeMarks {
  std::atomic<uint32_t> seq;
  uint32_t reserved;
  TypeMark mark[kTypeMarks];
};
static_assert(offsetof(TypeMarks, mark) == 8);
static_assert(sizeof(TypeMarks) == 832);

struct Layout {
  SegmentHeader header;
  Direction dir[2];
  SideLine side[2];
  TypeMarks marks[2];  // per direction
};
static_assert(offsetof(Layout, header) == 0);
static_assert(offsetof(Layout, dir) == 64);
static_assert(offsetof(Layout, side) == 576);
static_assert(offsetof(Layout, marks) == 704);
static_assert(sizeof(Layout) == 2368);
static_assert(sizeof(Layout) <= kHeaderBytes);

// The atomics must be plain memory words, identical in both processes.
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);

}  // namespace fastsock::shm
