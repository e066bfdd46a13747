#include <cerrno>
#include <cstring>

#include "output.hpp"

namespace fastsock_pipe {

bool write_csv(const std::string& path, const RunResult& r) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "fastsock-pipe: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  // Units are in the column names: us = microseconds, mbps = 10^6 bit/s.
  std::fprintf(f, "bytes,repeats,trials,t_min_us,t_median_us,t_p99_us,t_max_us,t_best_trial_us,"
               "mbps_min,mbps_avg,mbps_max\n");
  for (const SizeStats& s : r.sizes)
    std::fprintf(f, "%zu,%ld,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", s.bytes, s.repeats,
                 s.trials, s.t_min * 1e6, s.t_median * 1e6, s.t_p99 * 1e6, s.t_max * 1e6,
                 s.t_best_trial * 1e6, s.mbps_min, s.mbps_avg, s.mbps_max);
  return std::fclose(f) == 0;
}

}  // namespace fastsock_pipe
