#include "schedule.hpp"

#include <algorithm>

namespace fastsock_pipe {

std::vector<SizePoint> netpipe_schedule(std::size_t start, std::size_t end, int perturbation) {
  std::vector<SizePoint> out;
  if (start == 0 || start > end) return out;
  const long p = perturbation < 0 ? 0 : perturbation;
  // Same initial state as netpipe.c: for start > 1 the increment begins at start/2 and the
  // doubling counter one step further, so -l 1024 continues 1024, 1536, 2048, ...
  std::size_t inc = start > 1 ? start / 2 : 1;
  unsigned long nq = start > 1 ? 1 : 0;
  for (std::size_t len = start; len <= end; len += inc, ++nq) {
    // The increment doubles on every other base point: sizes go 2^k, 3*2^(k-1), 2^(k+1), ...
    if (nq > 2 && (nq % 2) != 0) inc += inc;
    const bool perturb = p > 0 && inc > static_cast<std::size_t>(p + 1);
    const long step = perturb ? p : p + 1;
    for (long pert = perturb ? -p : 0; pert <= p; pert += step) {
      const long bytes = static_cast<long>(len) + pert;
      if (bytes > 0) out.push_back({static_cast<std::size_t>(bytes), inc});
    }
  }
  return out;
}

std::vector<SizePoint> build_schedule(std::size_t start, std::size_t end, int perturbation) {
  std::vector<SizePoint> out = netpipe_schedule(start, end, perturbation);
  if (start == 0 || start > end) return out;
  const bool has_end =
      std::any_of(out.begin(), out.end(), [end](const SizePoint& s) { return s.bytes == end; });
  if (!has_end) {
    auto pos = std::find_if(out.begin(), out.end(),
                            [end](const SizePoint& s) { return s.bytes > end; });
    const std::size_t inc = out.empty() ? 1 : (pos == out.end() ? out.back().inc : pos->inc);
    out.insert(pos, SizePoint{end, inc});
  }
  return out;
}

long repeat_count(std::size_t prev_bytes, std::size_t inc, double tlast, double target_seconds,
                  long min_repeats) {
  // netpipe.c: MAX(RUNTM / ((double)bufflen / (bufflen - inc + 1.0) * tlast), TRIALS),
  // where bufflen is still the previous row's size.
  const double b = static_cast<double>(prev_bytes);
  const double denom = b / (b - static_cast<double>(inc) + 1.0) * tlast;
  double n = denom > 0 ? target_seconds / denom : static_cast<double>(min_repeats);
  // A negative denominator (inc > bufflen + 1, only possible right after a small -l) means
  // NetPIPE's estimate is meaningless there; fall back to the minimum like its MAX does.
  if (!(n > 0)) n = static_cast<double>(min_repeats);
  n = std::min(n, 1e9);
  return std::max(static_cast<long>(n), min_repeats);
}

}  // namespace fastsock_pipe
