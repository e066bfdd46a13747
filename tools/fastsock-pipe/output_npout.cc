#include <cerrno>
#include <cstring>

#include "output.hpp"

namespace fastsock_pipe {

bool write_npout(const std::string& path, const Options& opt, const RunResult& r) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "fastsock-pipe: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  for (const SizeStats& s : r.sizes) {
    // Bytes counted as NetPIPE counts them: both directions in bidirectional mode.
    const std::size_t bytes = s.bytes * static_cast<std::size_t>(s.directions);
    if (opt.npout_format == 5) {
      // NetPIPE 5.x (netpipe.c): "%9d %9.3lf %9.3lf %9.3lf %7.2lf" = bytes, Gbit/s (10^9)
      // of the average, slowest and fastest trial, and the average trial's time in usec;
      // integrity mode "%9d bytes %6u times %8d failures".
      if (opt.integrity) {
        std::fprintf(f, "%9zu bytes %6ld times %8llu failures\n", bytes, s.repeats,
                     static_cast<unsigned long long>(s.corrupted));
      } else {
        // NetPIPE's average is that of the trial times (not of the trial bandwidths); its
        // minimum bandwidth is the slowest trial's, its maximum the fastest's.
        const double gbit = static_cast<double>(bytes) * 8e-9;
        const double avg = s.t_avg_trial > 0 ? gbit / s.t_avg_trial : 0.0;
        std::fprintf(f, "%9zu %9.3lf %9.3lf %9.3lf %7.2lf\n", bytes, avg, s.mbps_min / 1e3,
                     s.mbps_max / 1e3, s.t_avg_trial * 1e6);
      }
      continue;
    }
    // netpipe.c 3.7: "%8d %lf %12.8lf" = bytes, bandwidth in Mbps of 2^20 bit/s, and the best
    // trial's one-way time in seconds; in integrity mode "%8d %d" = bytes, repetitions.
    if (opt.integrity) {
      std::fprintf(f, "%8zu %ld\n", bytes, s.repeats);
    } else {
      const double t = s.t_best_trial > 0 ? s.t_best_trial : 1e-6;  // as netpipe.c guards 0
      const double bps = static_cast<double>(bytes) * 8.0 / (t * 1024 * 1024);
      std::fprintf(f, "%8zu %lf %12.8lf\n", bytes, bps, t);
    }
  }
  return std::fclose(f) == 0;
}

}  // namespace fastsock_pipe
