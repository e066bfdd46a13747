// Layout of the per-process statistics area that `fastsock stat PID` reads.
//
// The library of process PID publishes /dev/shm/fastsock-stats.<PID> (mode 0600) the first
// time it tracks a TCP socket and unlinks it at exit (and before exec). The file holds a
// header and a fixed array of connection slots. Writers are the owning process's threads
// (atomics); the reader is another process that must treat every field as untrusted.
//
// Bit layout and offsets are fixed by the static_asserts below; bump kStatsVersion on any
// change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fastsock::stats {

inline constexpr uint64_t kStatsMagic = 0x7473'6b63'6f73'7466ull;  // "ftsockst"
inline constexpr uint32_t kStatsVersion = 2;  // 2: reason[240] (was 120)
inline constexpr uint32_t kSlotCount = 4096;
inline constexpr const char* kStatsPrefix = "/dev/shm/fastsock-stats.";

enum class SlotState : uint32_t { free = 0, listening = 1, connected = 2, closed = 3 };
// `inherited`: a connection this process did not open itself but found at start-up,
// passed on by exec from a parent (which side opened it is not known).
enum class Role : uint8_t { none = 0, client = 1, server = 2, listener = 3, inherited = 4 };
inline constexpr uint8_t kMaxRole = uint8_t(Role::inherited);

// An endpoint without pointers: family, address bytes (network order), port (host order).
struct Endpoint {
  uint16_t family;    // 0 = unknown, AF_INET, AF_INET6
  uint16_t port;
  uint8_t addr[16];
};
static_assert(sizeof(Endpoint) == 20);

struct alignas(64) Slot {
  std::atomic<uint32_t> state;     // SlotState; `free` slots may be claimed with a CAS
  int32_t fd;                      // the application's fd (the first one; dups share it)
  uint8_t role;                    // Role
  uint8_t transport;               // TransportId of the link carrying the connection
  uint8_t pad[2];
  Endpoint local;
  Endpoint peer;
  std::atomic<uint64_t> bytes_sent;
  std::atomic<uint64_t> bytes_received;
  uint64_t opened_ns;              // CLOCK_REALTIME when tracked
  // Why the connection is not on a faster link (NUL-terminated): room for every link's
  // part ("shm: ...; verbs: ...; vendor: ..."); at 120 the last one was cut.
  char reason[240];
};
static_assert(offsetof(Slot, state) == 0);
static_assert(offsetof(Slot, fd) == 4);
static_assert(offsetof(Slot, role) == 8);
static_assert(offsetof(Slot, transport) == 9);
static_assert(offsetof(Slot, local) == 12);
static_assert(offsetof(Slot, peer) == 32);
static_assert(offsetof(Slot, bytes_sent) == 56);
static_assert(offsetof(Slot, bytes_received) == 64);
static_assert(offsetof(Slot, opened_ns) == 72);
static_assert(offsetof(Slot, reason) == 80);
static_assert(sizeof(Slot) == 320);

struct alignas(64) Header {
  uint64_t magic;                  // kStatsMagic once the header is complete
  uint32_t version;                // kStatsVersion
  uint32_t slot_count;             // kSlotCount
  int32_t pid;
  uint32_t pad0;
  uint64_t start_time_ticks;       // field 22 of /proc/PID/stat: detects pid reuse
  char program[64];                // short program name
  char chain[64];                  // configured chain, e.g. "shm,verbs,vendor,tcp"
  char config_error[256];          // non-empty when a malformed setting forced pass-through
  std::atomic<uint64_t> untracked; // connections that found no free slot
  std::atomic<uint64_t> total_connections;
};
static_assert(offsetof(Header, magic) == 0);
static_assert(offsetof(Header, pid) == 16);
static_assert(offsetof(Header, start_time_ticks) == 24);
static_assert(offsetof(Header, program) == 32);
static_assert(offsetof(Header, chain) == 96);
static_assert(offsetof(Header, config_error) == 160);
static_assert(offsetof(Header, untracked) == 416);
static_assert(sizeof(Header) == 448);

struct Area {
  Header header;
  Slot slots[kSlotCount];
};
static_assert(offsetof(Area, slots) == sizeof(Header));
inline constexpr size_t kAreaSize = sizeof(Area);

}  // namespace fastsock::stats
