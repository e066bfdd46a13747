#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fastsock_pipe {

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest sample with at least q of the samples at or below it.
  std::size_t rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  if (rank == 0) rank = 1;
  return sorted[rank - 1];
}

SizeStats summarize_size(std::size_t bytes, long repeats, const std::vector<double>& samples,
                         const std::vector<double>& trial_means, int directions) {
  SizeStats s;
  s.bytes = bytes;
  s.directions = directions;
  s.repeats = repeats;
  s.trials = static_cast<int>(trial_means.size());
  if (!samples.empty()) {
    std::vector<double> sorted(samples);
    std::sort(sorted.begin(), sorted.end());
    s.t_min = sorted.front();
    s.t_max = sorted.back();
    s.t_p99 = percentile_sorted(sorted, 0.99);
    const std::size_t n = sorted.size();
    s.t_median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  }
  if (!trial_means.empty()) {
    s.t_best_trial = *std::min_element(trial_means.begin(), trial_means.end());
    double sum = 0, tsum = 0;
    s.mbps_min = INFINITY;
    for (double t : trial_means) {
      tsum += t;
      const double mbps = to_mbit_per_s(static_cast<double>(bytes) * directions, t);
      s.mbps_min = std::min(s.mbps_min, mbps);
      s.mbps_max = std::max(s.mbps_max, mbps);
      sum += mbps;
    }
    s.mbps_avg = sum / static_cast<double>(trial_means.size());
    s.t_avg_trial = tsum / static_cast<double>(trial_means.size());
  }
  return s;
}

HockneyFit hockney_fit(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  HockneyFit f;
  const std::size_t n = std::min(bytes.size(), seconds.size());
  if (n < 2) return f;
  const double nn = static_cast<double>(n);
  const double mx = std::accumulate(bytes.begin(), bytes.begin() + static_cast<long>(n), 0.0) / nn;
  const double my =
      std::accumulate(seconds.begin(), seconds.begin() + static_cast<long>(n), 0.0) / nn;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (bytes[i] - mx) * (bytes[i] - mx);
    sxy += (bytes[i] - mx) * (seconds[i] - my);
  }
  // A slope that is not positive (all sizes equal, or time falling with size) has no
  // asymptotic bandwidth: report the fit as invalid rather than a negative rate.
  if (sxx <= 0 || sxy <= 0) return f;
  const double slope = sxy / sxx;  // seconds per byte
  f.t0 = my - slope * mx;
  f.r_inf = 1.0 / slope;
  f.n_half = f.t0 * f.r_inf;
  // A negative start-up time means the straight line does not describe these data (on
  // loopback the largest sizes often leave the caches and bend the curve up): no fit.
  f.valid = f.t0 > 0;
  return f;
}

RunSummary summarize_run(const std::vector<SizeStats>& sizes) {
  RunSummary r;
  std::vector<double> xs, ys;
  bool first = true;
  for (const SizeStats& s : sizes) {
    if (first || s.t_median < r.min_latency) {
      r.min_latency = s.t_median;
      r.min_latency_bytes = s.bytes;
    }
    if (first || s.mbps_max > r.peak_mbps) {
      r.peak_mbps = s.mbps_max;
      r.peak_bytes = s.bytes;
    }
    first = false;
    xs.push_back(static_cast<double>(s.bytes));
    ys.push_back(s.t_median);
  }
  r.fit = hockney_fit(xs, ys);
  return r;
}

}  // namespace fastsock_pipe
