// fastsock-pipe's statistics on synthetic timings with known answers.
#include <catch2/catch.hpp>

#include <vector>

#include "stats.hpp"

using namespace fastsock_pipe;

TEST_CASE("percentile: nearest rank") {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(percentile_sorted(v, 0.99) == 99);
  CHECK(percentile_sorted(v, 0.5) == 50);
  CHECK(percentile_sorted(v, 1.0) == 100);
  CHECK(percentile_sorted(v, 0.0) == 1);
  CHECK(percentile_sorted({7.0}, 0.99) == 7);
}

TEST_CASE("size statistics: min/median/p99/max over samples, bandwidth per trial") {
  // 200 samples: 1..200 us, shuffled order must not matter.
  std::vector<double> samples;
  for (int i = 200; i >= 1; --i) samples.push_back(i * 1e-6);
  // Three trials of 1000-byte messages: 8 us, 10 us, 16 us per message
  // -> 1000 Mbit/s, 800 Mbit/s, 500 Mbit/s (decimal: 8000 bit / 8e-6 s = 1e9 bit/s).
  const std::vector<double> trials = {10e-6, 8e-6, 16e-6};
  const SizeStats s = summarize_size(1000, 1234, samples, trials);
  CHECK(s.bytes == 1000);
  CHECK(s.repeats == 1234);
  CHECK(s.trials == 3);
  CHECK(s.t_min == Approx(1e-6));
  CHECK(s.t_max == Approx(200e-6));
  CHECK(s.t_median == Approx(100.5e-6));  // even count: mean of the middle two
  CHECK(s.t_p99 == Approx(198e-6));
  CHECK(s.t_best_trial == Approx(8e-6));
  CHECK(s.mbps_max == Approx(1000.0));
  CHECK(s.mbps_min == Approx(500.0));
  CHECK(s.mbps_avg == Approx((1000.0 + 800.0 + 500.0) / 3));
}

TEST_CASE("Hockney fit recovers t0, r_inf and n_half from exact data") {
  // t(n) = 5 us + n / (1.25e9 bytes/s)  ->  r_inf = 10000 Mbit/s, n_half = 6250 bytes.
  std::vector<double> n, t;
  for (double bytes : {1.0, 64.0, 1024.0, 65536.0, 1048576.0}) {
    n.push_back(bytes);
    t.push_back(5e-6 + bytes / 1.25e9);
  }
  const HockneyFit f = hockney_fit(n, t);
  REQUIRE(f.valid);
  CHECK(f.t0 == Approx(5e-6).epsilon(1e-9));
  CHECK(f.r_inf == Approx(1.25e9).epsilon(1e-9));
  CHECK(f.r_inf_mbps() == Approx(10000.0).epsilon(1e-9));
  CHECK(f.n_half == Approx(6250.0).epsilon(1e-6));
}

TEST_CASE("Hockney fit is least squares: symmetric noise leaves the line in place") {
  // Pairs of points at +-1 us around t = 2 us + n / 1e8 at each size.
  std::vector<double> n, t;
  for (double bytes : {100.0, 1000.0, 10000.0}) {
    for (double noise : {-1e-6, 1e-6}) {
      n.push_back(bytes);
      t.push_back(2e-6 + bytes / 1e8 + noise);
    }
  }
  const HockneyFit f = hockney_fit(n, t);
  REQUIRE(f.valid);
  CHECK(f.t0 == Approx(2e-6).epsilon(1e-6));
  CHECK(f.r_inf == Approx(1e8).epsilon(1e-6));
}

TEST_CASE("Hockney fit refuses data without a positive slope") {
  CHECK_FALSE(hockney_fit({1, 2, 3}, {3e-6, 2e-6, 1e-6}).valid);
  CHECK_FALSE(hockney_fit({8, 8}, {1e-6, 2e-6}).valid);
  CHECK_FALSE(hockney_fit({8}, {1e-6}).valid);
}

TEST_CASE("Hockney fit refuses a line with a negative start-up time") {
  // Flat at 3 us for small sizes, then steep: the least-squares line crosses zero above 0.
  CHECK_FALSE(hockney_fit({1, 1000, 100000, 1000000}, {3e-6, 3e-6, 10e-6, 400e-6}).valid);
}

TEST_CASE("run summary: minimum latency, peak bandwidth, fit over the medians") {
  std::vector<SizeStats> sizes;
  for (std::size_t bytes : {1u, 1000u, 100000u}) {
    const double t = 4e-6 + static_cast<double>(bytes) / 1e9;  // r_inf 8000 Mbit/s
    sizes.push_back(summarize_size(bytes, 10, {t}, {t}));
  }
  const RunSummary r = summarize_run(sizes);
  CHECK(r.min_latency_bytes == 1);
  CHECK(r.min_latency == Approx(4.001e-6));
  CHECK(r.peak_bytes == 100000);
  CHECK(r.peak_mbps == Approx(100000 * 8.0 / 104e-6 / 1e6));
  REQUIRE(r.fit.valid);
  CHECK(r.fit.r_inf_mbps() == Approx(8000.0).epsilon(1e-6));
  CHECK(r.fit.n_half == Approx(4000.0).epsilon(1e-6));
}
