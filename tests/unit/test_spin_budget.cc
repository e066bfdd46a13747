// SpinBudget: no budget means no check; a budget lasts at least as long as asked, reads the
// clock only every kClockStride checks, and ends; a thread's budgets shrink while its spins
// run out, and come back when one finds what it waited for or a probe does.
#include <catch2/catch.hpp>

#include "link_io.hpp"

using fastsock::link_io::now_ns;
using fastsock::link_io::SpinBudget;
using fastsock::link_io::SpinHistory;

TEST_CASE("a spin budget of 0 allows no check") {
  SpinBudget spin(0, nullptr, nullptr);
  CHECK_FALSE(spin.more());
  CHECK_FALSE(spin.more());
}

TEST_CASE("a spin budget lasts at least its time, then ends for good") {
  const int64_t start = now_ns();
  SpinBudget spin(2000, nullptr, nullptr);  // 2 ms
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
  SpinBudget spin(1, nullptr, nullptr);
  long checks = 0;
  while (spin.more()) ++checks;
  CHECK(checks >= long(2 * SpinBudget::kClockStride - 1));
  CHECK(checks % SpinBudget::kClockStride == SpinBudget::kClockStride - 1);
}

TEST_CASE("a spin budget is cut to a wait's timeout") {
  const timespec zero{0, 0}, two_ms{0, 2'000'000};
  SpinBudget none(50, &zero, nullptr);
  CHECK_FALSE(none.more());  // a poll with timeout 0 does not spin
  // A 10 s budget for a wait of 2 ms lasts 2 ms (well under a second, however slow the host).
  const int64_t start = now_ns();
  SpinBudget cut(10'000'000, &two_ms, nullptr);
  while (cut.more()) {
  }
  const int64_t took = now_ns() - start;
  CHECK(took >= 2'000'000);
  CHECK(took < 1'000'000'000);
}

namespace {

// Spins one wait of `us` to its end, or for one check only when `found` (a wait whose peer
// answered during the spin); returns how long it spun in ns (0 when found).
int64_t spin_wait(SpinHistory& h, uint32_t us, bool found) {
  SpinBudget spin(us, nullptr, &h);
  if (found) {
    (void)spin.more();
    return 0;
  }
  const int64_t start = now_ns();
  while (spin.more()) {
  }
  return now_ns() - start;
}

}  // namespace

TEST_CASE("budgets halve while spins run out, down to a sixteenth, and come back in full") {
  SpinHistory h;
  CHECK(spin_wait(h, 1000, false) >= 1'000'000);
  CHECK(h.shift == 1);
  (void)spin_wait(h, 1000, false);
  CHECK(h.shift == 2);
  for (int i = 0; i < 5; ++i) (void)spin_wait(h, 1000, false);
  CHECK(h.shift == SpinHistory::kMaxShift);  // no further
  // Reduced to a sixteenth: 160 ms lasts 10 ms (bounds far apart: a loaded host may
  // preempt the spin, never for 140 ms).
  const int64_t reduced = spin_wait(h, 160'000, false);
  CHECK(reduced >= 10'000'000);
  CHECK(reduced < 150'000'000);
  // A wait whose peer answered while it spun restores the full budget.
  CHECK(spin_wait(h, 1000, true) == 0);
  CHECK(h.shift == 0);
  CHECK(spin_wait(h, 20'000, false) >= 20'000'000);
}

TEST_CASE("a reduced thread probes with the full budget every kProbeEvery-th wait") {
  SpinHistory h;
  h.shift = SpinHistory::kMaxShift;
  h.waits = 0;
  int full = 0;
  for (unsigned i = 1; i <= 2 * SpinHistory::kProbeEvery; ++i) {
    SpinBudget spin(16'000, nullptr, &h);  // 16 ms, or 1 ms reduced
    const int64_t start = now_ns();
    while (spin.more()) {
    }
    if (now_ns() - start >= 16'000'000) ++full;
  }
  CHECK(full == 2);
  CHECK(h.shift == SpinHistory::kMaxShift);  // the probes ran out too
}

TEST_CASE("a wait that does not spin teaches nothing") {
  SpinHistory h;
  h.shift = 2;
  {
    const timespec zero{0, 0};
    SpinBudget none(50, &zero, &h);  // a poll with timeout 0
    CHECK_FALSE(none.more());
  }
  { SpinBudget unused(50, nullptr, &h); }  // ready before the first check
  CHECK(h.shift == 2);
}
