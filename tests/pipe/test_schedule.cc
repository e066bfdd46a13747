// fastsock-pipe's size schedule against sequences NPtcp 3.7.2 (Debian netpipe-tcp) printed
// on this project's build host (`NPtcp -h 127.0.0.1 -u U -p P [-l L] -n 3`, schedule column).
// pipe_schedule_vs_nptcp.sh repeats the comparison live against the installed NPtcp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "schedule.hpp"

using namespace fastsock_pipe;

namespace {
std::vector<std::size_t> sizes(const std::vector<SizePoint>& s) {
  std::vector<std::size_t> out;
  for (const SizePoint& p : s) out.push_back(p.bytes);
  return out;
}
}  // namespace

TEST_CASE("schedule: NPtcp -u 100 -p 3 (the default perturbation)") {
  const std::vector<std::size_t> nptcp = {1,  2,  3,  4,  6,  8,  12, 13, 16, 19, 21, 24, 27,
                                          29, 32, 35, 45, 48, 51, 61, 64, 67, 93, 96, 99};
  CHECK(sizes(netpipe_schedule(1, 100, 3)) == nptcp);
}

TEST_CASE("schedule: NPtcp -u 200 -p 0 gives the bare 2^k / 3*2^k base points") {
  const std::vector<std::size_t> nptcp = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192};
  CHECK(sizes(netpipe_schedule(1, 200, 0)) == nptcp);
}

TEST_CASE("schedule: NPtcp -u 300 -p 2 repeats a size where perturbations overlap") {
  const std::vector<std::size_t> nptcp = {1,  2,  3,  4,  6,  6,  8,   10,  10,  12,  14,  14,  16,
                                          18, 22, 24, 26, 30, 32, 34,  46,  48,  50,  62,  64,  66,
                                          94, 96, 98, 126, 128, 130, 190, 192, 194, 254, 256, 258};
  CHECK(sizes(netpipe_schedule(1, 300, 2)) == nptcp);
}

TEST_CASE("schedule: NPtcp -l 5 -u 700 -p 0 starts the increment at l/2") {
  const std::vector<std::size_t> nptcp = {5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513};
  CHECK(sizes(netpipe_schedule(5, 700, 0)) == nptcp);
}

TEST_CASE("schedule: perturbation starts only once the increment exceeds p+1") {
  const auto s = netpipe_schedule(1, 1 << 20, 3);
  for (const SizePoint& p : s) {
    const bool power_or_three = (p.bytes & (p.bytes - 1)) == 0 ||
                                (p.bytes % 3 == 0 && ((p.bytes / 3) & (p.bytes / 3 - 1)) == 0);
    if (p.inc <= 4) CHECK(power_or_three);  // no +-3 neighbours yet
  }
  CHECK(s.size() > 100);
}

TEST_CASE("schedule: the upper bound is always measured, in order") {
  SECTION("appended when NetPIPE's base points stop short of it") {
    const auto s = sizes(build_schedule(1, 100, 3));
    REQUIRE(s.size() == 26);
    CHECK(s.back() == 100);
    CHECK(s[24] == 99);
  }
  SECTION("inserted before a perturbed point that exceeds it") {
    const auto s = sizes(build_schedule(1, 97, 3));
    CHECK(s[s.size() - 2] == 97);
    CHECK(s.back() == 99);
  }
  SECTION("not duplicated when NetPIPE already has it") {
    const auto s = sizes(build_schedule(1, 96, 0));
    CHECK(s.back() == 96);
    CHECK(std::count(s.begin(), s.end(), 96u) == 1);
  }
  SECTION("-l = -u: NetPIPE's increment starts at l/2, so the point is perturbed") {
    CHECK(sizes(build_schedule(4096, 4096, 3)) == std::vector<std::size_t>{4093, 4096, 4099});
    CHECK(sizes(build_schedule(4096, 4096, 0)) == std::vector<std::size_t>{4096});
  }
  SECTION("an empty range") { CHECK(build_schedule(10, 5, 3).empty()); }
}

TEST_CASE("repeat rule: NetPIPE's RUNTM / (b/(b-inc+1) * tlast), at least TRIALS") {
  // 1024 bytes took 10 us; next base point 1536 (inc 512): 0.25 / (1024/513 * 1e-5) = 12524.
  CHECK(repeat_count(1024, 512, 1e-5, 0.25, 7) == 12524);
  // Slow sizes fall back to the minimum.
  CHECK(repeat_count(1 << 20, 1 << 19, 0.5, 0.25, 7) == 7);
  // The first row after a probe at 1 byte with inc 1: b/(b-inc+1) = 1.
  CHECK(repeat_count(1, 1, 2.5e-5, 0.25, 7) == 10000);
}
