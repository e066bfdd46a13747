#include <cerrno>
#include <cstring>

#include "output.hpp"

namespace fastsock_pipe {

bool write_csv(const std::string& path, const Options& opt, const std::vector<Lane>& lanes) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "fastsock-pipe: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  const std::size_t esize = element_size(opt.element);
  // Units are in the column names: us = microseconds, mbps = 10^6 bit/s. One row per
  // transport and size; ratio_* compare with the first transport's row of the same size.
  std::fprintf(f, "transport,bytes,elements,repeats,trials,t_min_us,t_median_us,t_p99_us,t_max_us,"
               "t_best_trial_us,mbps_min,mbps_avg,mbps_max,ratio_t_median,ratio_t_p99,"
               "ratio_mbps_avg\n");
  const auto& base = lanes.front().result.sizes;
  for (const Lane& l : lanes) {
    for (std::size_t r = 0; r < l.result.sizes.size(); ++r) {
      const SizeStats& s = l.result.sizes[r];
      std::fprintf(f, "%s,%zu,%zu,%ld,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f", l.name.c_str(),
                   s.bytes, s.bytes / esize, s.repeats, s.trials, s.t_min * 1e6, s.t_median * 1e6,
                   s.t_p99 * 1e6, s.t_max * 1e6, s.t_best_trial * 1e6, s.mbps_min, s.mbps_avg,
                   s.mbps_max);
      if (r < base.size() && base[r].t_median > 0 && base[r].t_p99 > 0 && base[r].mbps_avg > 0)
        std::fprintf(f, ",%.5f,%.5f,%.5f\n", s.t_median / base[r].t_median,
                     s.t_p99 / base[r].t_p99, s.mbps_avg / base[r].mbps_avg);
      else
        std::fprintf(f, ",,,\n");
    }
  }
  return std::fclose(f) == 0;
}

}  // namespace fastsock_pipe
