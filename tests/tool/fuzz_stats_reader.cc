// libFuzzer target for the stats decoder (tools/fastsock/stats_reader.cc): the stats file is
// written by another process, so `fastsock stat` parses data across a trust boundary.
//
// Input: byte 0 holds flags, the rest is laid over the start of a zeroed area (header, then
// slots; inputs are kept small, so the fuzzer explores the header and the first slots):
//   bit 0  force a valid magic, version, slot count and pid, so decoding reaches the slots
//   bit 1  pass a wrong size, to exercise the size check
// Besides the sanitizers' checks, the invariants the output relies on abort on violation.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "stats_layout.hpp"
#include "stats_reader.hpp"

namespace stats = fastsock::stats;
using namespace fastsock::tool;

namespace {

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz_stats_reader: invariant failed: %s (line %d)\n", #cond,   \
                   __LINE__);                                                              \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kPid = 4242;

bool printable(const std::string& s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

template <class T>
void put(std::vector<unsigned char>& area, size_t offset, T value) {
  std::memcpy(&area[offset], &value, sizeof value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static std::vector<unsigned char> area(stats::kAreaSize);
  std::memset(area.data(), 0, area.size());
  uint8_t flags = data[0];
  std::memcpy(area.data(), data + 1, std::min(size - 1, area.size()));
  if (flags & 1) {
    put(area, offsetof(stats::Header, magic), stats::kStatsMagic);
    put(area, offsetof(stats::Header, version), stats::kStatsVersion);
    put(area, offsetof(stats::Header, slot_count), stats::kSlotCount);
    put(area, offsetof(stats::Header, pid), int32_t(kPid));
  }
  size_t area_size = (flags & 2) ? size : area.size();
  if (area_size > area.size()) area_size = area.size();

  ProcessStats out;
  std::string detail;
  bool ok = decode_area(area.data(), area_size, kPid, out, detail);
  if (!ok) {
    FUZZ_CHECK(!detail.empty());
    return 0;
  }
  FUZZ_CHECK(area_size == stats::kAreaSize);
  FUZZ_CHECK(out.pid == kPid);
  FUZZ_CHECK(printable(out.program) && out.program.size() <= sizeof(stats::Header::program));
  FUZZ_CHECK(printable(out.chain) && out.chain.size() <= sizeof(stats::Header::chain));
  FUZZ_CHECK(printable(out.config_error) &&
             out.config_error.size() <= sizeof(stats::Header::config_error));
  FUZZ_CHECK(out.connections.size() + out.ignored_slots <= stats::kSlotCount);
  for (size_t i = 0; i < out.connections.size(); ++i) {
    const ConnectionStats& c = out.connections[i];
    FUZZ_CHECK(c.state == stats::SlotState::listening || c.state == stats::SlotState::connected);
    FUZZ_CHECK(uint8_t(c.role) <= stats::kMaxRole);
    FUZZ_CHECK(int(c.transport) < fastsock::kTransportCount);
    FUZZ_CHECK(printable(c.reason) && c.reason.size() <= sizeof(stats::Slot::reason));
    FUZZ_CHECK(printable(c.local) && printable(c.peer));
    FUZZ_CHECK(i == 0 || out.connections[i - 1].fd <= c.fd);  // sorted by fd
  }
  return 0;
}
