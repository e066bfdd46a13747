// The stats decoder and its helpers against hostile input (tools/fastsock/stats_reader.hpp).
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "guarded_copy.hpp"
#include "stats_layout.hpp"
#include "stats_reader.hpp"
#include "text.hpp"

namespace stats = fastsock::stats;
using namespace fastsock::tool;

namespace {

std::vector<unsigned char> random_area(std::mt19937& rng, int pid) {
  std::vector<unsigned char> area(stats::kAreaSize);
  for (auto& b : area) b = static_cast<unsigned char>(rng());
  // A valid header in front of random bytes: everything after it must be bound-checked.
  uint64_t magic = stats::kStatsMagic;
  uint32_t version = stats::kStatsVersion, slots = stats::kSlotCount;
  int32_t pid32 = pid;
  std::memcpy(&area[offsetof(stats::Header, magic)], &magic, sizeof magic);
  std::memcpy(&area[offsetof(stats::Header, version)], &version, sizeof version);
  std::memcpy(&area[offsetof(stats::Header, slot_count)], &slots, sizeof slots);
  std::memcpy(&area[offsetof(stats::Header, pid)], &pid32, sizeof pid32);
  return area;
}

bool all_printable(const std::string& s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

}  // namespace

TEST_CASE("random slots behind a valid header decode to sane values", "[tool][stats]") {
  std::mt19937 rng(20240601);
  for (int round = 0; round < 20; ++round) {
    auto area = random_area(rng, 1234);
    // Sprinkle plausible slots so that some pass the state/role/transport checks.
    for (uint32_t i = 0; i < stats::kSlotCount; i += 7) {
      unsigned char* slot = &area[sizeof(stats::Header) + i * sizeof(stats::Slot)];
      uint32_t state = 1 + rng() % 2;
      std::memcpy(slot + offsetof(stats::Slot, state), &state, sizeof state);
      slot[offsetof(stats::Slot, role)] = static_cast<unsigned char>(rng() % 5);
      slot[offsetof(stats::Slot, transport)] = static_cast<unsigned char>(rng() % 5);
    }
    ProcessStats out;
    std::string detail;
    REQUIRE(decode_area(area.data(), area.size(), 1234, out, detail));
    CHECK(all_printable(out.program));
    CHECK(out.program.size() <= sizeof(stats::Header::program));
    CHECK(out.config_error.size() <= sizeof(stats::Header::config_error));
    CHECK(out.connections.size() + out.ignored_slots <= stats::kSlotCount);
    CHECK(out.connections.size() > 0);
    for (const ConnectionStats& c : out.connections) {
      CHECK(int(c.role) <= int(stats::kMaxRole));
      CHECK(int(c.transport) < fastsock::kTransportCount);
      CHECK((c.state == stats::SlotState::listening || c.state == stats::SlotState::connected));
      CHECK(all_printable(c.reason));
      CHECK(c.reason.size() <= sizeof(stats::Slot::reason));
      CHECK(all_printable(c.local));
      CHECK(all_printable(c.peer));
    }
  }
}

TEST_CASE("a header that is not a valid area is rejected with a reason", "[tool][stats]") {
  std::mt19937 rng(7);
  auto area = random_area(rng, 99);
  ProcessStats out;
  std::string detail;
  CHECK_FALSE(decode_area(area.data(), area.size() - 1, 99, out, detail));
  CHECK(detail.find("wrong size") != std::string::npos);
  CHECK_FALSE(decode_area(area.data(), area.size(), 98, out, detail));
  CHECK(detail == "written for pid 99, not 98");
  area[offsetof(stats::Header, magic)] ^= 1;
  CHECK_FALSE(decode_area(area.data(), area.size(), 99, out, detail));
  CHECK(detail.find("bad magic") != std::string::npos);
}

TEST_CASE("untrusted strings stop at their field and lose control bytes", "[tool][text]") {
  char field[8] = {'a', '\x1b', '[', '\n', 'z', '\xff', 'q', 'r'};  // no NUL
  CHECK(printable(field, sizeof field) == "a?[?z?qr");
  char shorter[8] = {'o', 'k', '\0', 'x', 'x', 'x', 'x', 'x'};
  CHECK(printable(shorter, sizeof shorter) == "ok");
}

TEST_CASE("JSON strings are quoted and escaped", "[tool][text]") {
  CHECK(json_quote("plain") == "\"plain\"");
  CHECK(json_quote("a\"b\\c\nd\te\x01") == "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
}

TEST_CASE("a mapping truncated under the reader gives an error, not SIGBUS", "[tool][stats]") {
  long page = sysconf(_SC_PAGESIZE);
  int fd = memfd_create("fastsock-tool-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 2 * page) == 0);
  void* map = mmap(nullptr, size_t(2 * page), PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(map != MAP_FAILED);
  std::vector<unsigned char> copy(size_t(2 * page));
  CHECK(copy_guarded(copy.data(), map, copy.size()));
  // What a hostile or buggy owner can do while `fastsock stat` reads the file.
  REQUIRE(ftruncate(fd, page) == 0);
  CHECK_FALSE(copy_guarded(copy.data(), map, copy.size()));
  CHECK(copy_guarded(copy.data(), map, size_t(page)));  // the guard is re-armed each time
  munmap(map, size_t(2 * page));
  close(fd);
}
