// SpinBudget: no budget means no check; a budget lasts at least as long as asked, reads the
// clock only every kClockStride checks, and ends.
#include <catch2/catch.hpp>

#include "link_io.hpp"

using fastsock::link_io::now_ns;
using fastsock::link_io::SpinBudget;

TEST_CASE("a spin budget of 0 allows no check") {
  SpinBudget spin(0);
  CHECK_FALSE(spin.more());
  CHECK_FALSE(spin.more());
}

TEST_CASE("a spin budget lasts at least its time, then ends for good") {
  const int64_t start = now_ns();
  SpinBudget spin(2000);  // 2 ms
  long checks = 0;
  while (spin.more()) ++checks;
  const int64_t took = now_ns() - start;
  CHECK(took >= 2'000'000);
  // The clock starts at the first stride: every check before it is allowed.
  CHECK(checks >= long(2 * SpinBudget::kClockStride - 1));
  CHECK_FALSE(spin.more());
}

TEST_CASE("a spin budget ends only where it reads the clock, once per stride") {
  // The clock is read at every kClockStride-th check only (the first reading starts the
  // budget), so the check that ends it is such a one, and never the first.
  SpinBudget spin(1);
  long checks = 0;
  while (spin.more()) ++checks;
  CHECK(checks >= long(2 * SpinBudget::kClockStride - 1));
  CHECK(checks % SpinBudget::kClockStride == SpinBudget::kClockStride - 1);
}

TEST_CASE("a spin budget is cut to a wait's timeout") {
  const timespec zero{0, 0}, two_ms{0, 2'000'000};
  SpinBudget none(50, &zero);
  CHECK_FALSE(none.more());  // a poll with timeout 0 does not spin
  // A 10 s budget for a wait of 2 ms lasts 2 ms (well under a second, however slow the host).
  const int64_t start = now_ns();
  SpinBudget cut(10'000'000, &two_ms);
  while (cut.more()) {
  }
  const int64_t took = now_ns() - start;
  CHECK(took >= 2'000'000);
  CHECK(took < 1'000'000'000);
}
