// Statistics of one message size and of a whole run. Pure functions on timings in seconds,
// so the unit tests feed them synthetic data with known answers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastsock_pipe {

// Nearest-rank percentile (q in [0,1]) of `sorted` (ascending, non-empty).
double percentile_sorted(const std::vector<double>& sorted, double q);

// Bits per second -> decimal megabits per second (1 Mbit/s = 10^6 bit/s).
inline double to_mbit_per_s(double bytes, double seconds) {
  return seconds > 0 ? bytes * 8.0 / seconds / 1e6 : 0.0;
}

struct SizeStats {
  std::size_t bytes = 0;
  long repeats = 0;          // messages (ping-pong: round trips) per trial
  int trials = 0;
  int directions = 1;        // 2 in bidirectional mode: bandwidth counts both directions
  // One-way time: half a round trip in ping-pong, time per message in streaming. Taken over
  // every individual sample (ping-pong records each round trip; streaming one per trial).
  double t_min = 0, t_median = 0, t_p99 = 0, t_max = 0;
  // NetPIPE's figure: the lowest trial average (what NPtcp prints and writes to np.out).
  double t_best_trial = 0;
  double t_avg_trial = 0;    // mean of the trial averages (NetPIPE 5.x's figure)
  // Bandwidth of each trial's average, decimal Mbit/s: bytes * directions * 8 / time.
  double mbps_min = 0, mbps_avg = 0, mbps_max = 0;
  uint64_t corrupted = 0;    // integrity mode: corrupted bytes found at this size (both ends)
  // When each timed trial started, seconds since the run's start: shows the interleaving
  // of --compare (trial t of every transport before trial t+1 of any).
  std::vector<double> trial_starts;
};

// `samples`: every one-way time measured at this size; `trial_means`: each trial's average
// one-way time. Both non-empty.
SizeStats summarize_size(std::size_t bytes, long repeats, const std::vector<double>& samples,
                         const std::vector<double>& trial_means, int directions = 1);

// Hockney's model t(n) = t0 + n / r_inf, fitted by ordinary least squares.
struct HockneyFit {
  bool valid = false;
  double t0 = 0;           // seconds
  double r_inf = 0;        // bytes per second
  double n_half = 0;       // bytes: size reaching half of r_inf (= t0 * r_inf)
  double r_inf_mbps() const { return r_inf * 8.0 / 1e6; }
};
// Why an invalid fit has no numbers, as the tables print it.
inline constexpr const char* kNoHockneyFitWhy =
    "needs time growing with size and a positive t0";
HockneyFit hockney_fit(const std::vector<double>& bytes, const std::vector<double>& seconds);

struct RunSummary {
  double min_latency = 0;       // seconds: lowest median one-way time over all sizes
  std::size_t min_latency_bytes = 0;
  double peak_mbps = 0;         // highest per-trial bandwidth over all sizes
  std::size_t peak_bytes = 0;
  HockneyFit fit;               // over each size's median
};
RunSummary summarize_run(const std::vector<SizeStats>& sizes);

}  // namespace fastsock_pipe
