#include "output.hpp"

namespace fastsock_pipe {

std::string arrays_line(const Lane& lane) {
  auto end = [](const std::string& path, const std::string& transport) {
    return path + (transport.empty() ? " (no fastsock transport)" : " over fastsock " + transport);
  };
  return "arrays: transmitter " + end(lane.tx_path, lane.tx_transport) + ", receiver " +
         end(lane.rx_path, lane.rx_transport);
}

void table_header(std::FILE* out, const Options& opt) {
  // The transmitter is this process: its own lookup says which path its arrays take (the
  // receiver's is in the summary and the JSON).
  std::fprintf(out, "# fastsock-pipe %s, %s%s%s, %s elements (%s); sizes %zu..%zu, "
               "perturbation %d, %d trials\n",
               kVersion, mode_name(opt.mode), opt.integrity ? ", integrity check" : "",
               opt.cache_invalidate ? ", cache invalidated" : "", element_name(opt.element),
               array_path_description(array_path(opt.element, opt.api)), opt.lower, opt.upper, opt.perturbation, opt.trials);
  std::fprintf(out, "# time: %s, microseconds; bandwidth: per trial, Mbit/s (10^6 bit/s)%s\n",
               opt.mode == Mode::pingpong ? "half round trip"
               : opt.mode == Mode::stream ? "per message"
                                          : "per repetition (one message each way)",
               opt.mode == Mode::bidirectional ? ", both directions" : "");
  std::fprintf(out, "%4s %10s %8s %10s %10s %10s %10s %10s %10s %10s\n", "#", "bytes", "reps",
               "t_min", "t_median", "t_p99", "t_max", "Mbps_min", "Mbps_avg", "Mbps_max");
  std::fflush(out);
}

void table_row(std::FILE* out, const SizeStats& s, std::size_t index) {
  std::fprintf(out, "%4zu %10zu %8ld %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", index,
               s.bytes, s.repeats, s.t_min * 1e6, s.t_median * 1e6, s.t_p99 * 1e6, s.t_max * 1e6,
               s.mbps_min, s.mbps_avg, s.mbps_max);
  std::fflush(out);
}

void table_summary(std::FILE* out, const Lane& lane, const RunInfo& info) {
  const RunResult& r = lane.result;
  const RunSummary& s = r.summary;
  std::fprintf(out, "# %zu sizes in %.1f s%s%s\n", r.sizes.size(), info.wall_seconds,
               info.stopped_early ? "; stopped early: " : "",
               info.stopped_early ? info.stop_reason.c_str() : "");
  if (r.sizes.empty()) return;
  std::fprintf(out, "# %s\n", arrays_line(lane).c_str());
  std::fprintf(out, "# minimum latency: %.2f us (median at %zu bytes)\n", s.min_latency * 1e6,
               s.min_latency_bytes);
  std::fprintf(out, "# peak bandwidth: %.2f Mbit/s (at %zu bytes)\n", s.peak_mbps, s.peak_bytes);
  if (s.fit.valid)
    std::fprintf(out, "# Hockney fit t(n) = t0 + n/r_inf: t0 = %.2f us, r_inf = %.2f Mbit/s, "
                 "n_half = %.0f bytes\n", s.fit.t0 * 1e6, s.fit.r_inf_mbps(), s.fit.n_half);
  else
    std::fprintf(out, "# Hockney fit: none (%s)\n", kNoHockneyFitWhy);
  std::fflush(out);
}

}  // namespace fastsock_pipe
