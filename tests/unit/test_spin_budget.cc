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

void busy_until(int64_t t) {
  while (now_ns() < t) {
  }
}

// One wait of a thread with history `h` and a budget of `us`: its spin runs to its end, then
// (as a wait sleeps) the wait lasts until `wait_ns` after it began; or, with `found`, the
// first check finds the event. Returns how long the spin itself lasted (0 when found).
int64_t one_wait(SpinHistory& h, uint32_t us, int64_t wait_ns, bool found = false) {
  const int64_t start = now_ns();
  SpinBudget spin(us, nullptr, &h);
  if (found) {
    (void)spin.more();
    return 0;
  }
  while (spin.more()) {
  }
  const int64_t spun = now_ns() - start;
  busy_until(start + wait_ns);
  return spun;
}

}  // namespace

TEST_CASE("waits that outlast the budget halve it, down to a sixteenth; one within it restores it") {
  SpinHistory h;
  // 1 ms budgets, waits of 3 ms (the event comes after the spin would have ended anyway):
  // the first kPatience in a row change nothing, each later one halves the budget.
  for (unsigned i = 0; i < SpinHistory::kPatience; ++i)
    CHECK(one_wait(h, 1000, 3'000'000) >= 1'000'000);
  CHECK(h.shift == 0);
  (void)one_wait(h, 1000, 3'000'000);
  CHECK(h.shift == 1);
  (void)one_wait(h, 1000, 3'000'000);
  CHECK(h.shift == 2);
  for (int i = 0; i < 5; ++i) (void)one_wait(h, 1000, 3'000'000);
  CHECK(h.shift == SpinHistory::kMaxShift);  // no further
  // Reduced to a sixteenth: a 160 ms budget spins 10 ms (bounds far apart: a loaded host may
  // preempt the spin, never for 140 ms); the wait, 200 ms, still outlasts the full budget.
  const int64_t reduced = one_wait(h, 160'000, 200'000'000);
  CHECK(reduced >= 10'000'000);
  CHECK(reduced < 150'000'000);
  CHECK(h.shift == SpinHistory::kMaxShift);
  // A wait whose event came 5 ms in: the reduced spin (1 ms of 16) ran out, but the full
  // budget would have found it, so the full budget is back.
  CHECK(one_wait(h, 16'000, 5'000'000) < 16'000'000);
  CHECK(h.shift == 0);
  CHECK(h.over == 0);
  CHECK(one_wait(h, 20'000, 20'000'000) >= 20'000'000);
}

TEST_CASE("waits only sometimes longer than the budget keep it in full") {
  SpinHistory h;
  for (int i = 0; i < 12; ++i) {
    (void)one_wait(h, 1000, 3'000'000);                    // outlasts it
    CHECK(h.shift == 0);
    if (i % 3 == 2) (void)one_wait(h, 1000, 0, true);      // found while spinning, every third
  }
  CHECK(h.over == 0);
}

TEST_CASE("a wait whose event comes while it spins restores the full budget") {
  SpinHistory h;
  h.shift = 3;
  h.waits = 1;
  CHECK(one_wait(h, 20'000, 0, true) == 0);
  CHECK(h.shift == 0);
}

TEST_CASE("a reduced thread probes with the full budget every kProbeEvery-th wait") {
  SpinHistory h;
  h.shift = SpinHistory::kMaxShift;
  h.waits = 0;
  int full = 0;
  for (unsigned i = 1; i <= 2 * SpinHistory::kProbeEvery; ++i)
    // 16 ms, or 1 ms reduced; every wait lasts 20 ms, beyond the full budget.
    if (one_wait(h, 16'000, 20'000'000) >= 16'000'000) ++full;
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
