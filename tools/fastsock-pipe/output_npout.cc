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
    // netpipe.c 3.7: "%8d %lf %12.8lf" = bytes, bandwidth in Mbps of 2^20 bit/s, and the best
    // trial's one-way time in seconds; in integrity mode "%8d %d" = bytes, repetitions.
    if (opt.integrity) {
      std::fprintf(f, "%8zu %ld\n", s.bytes, s.repeats);
    } else {
      const double t = s.t_best_trial > 0 ? s.t_best_trial : 1e-6;  // as netpipe.c guards 0
      const double bps = static_cast<double>(s.bytes) * 8.0 / (t * 1024 * 1024);
      std::fprintf(f, "%8zu %lf %12.8lf\n", s.bytes, bps, t);
    }
  }
  return std::fclose(f) == 0;
}

}  // namespace fastsock_pipe
