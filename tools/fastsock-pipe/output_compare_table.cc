#include <string>

#include "output.hpp"

namespace fastsock_pipe {
namespace {

const SizeStats* row_of(const Lane& lane, std::size_t row) {
  return row < lane.result.sizes.size() ? &lane.result.sizes[row] : nullptr;
}

}  // namespace

void compare_header(std::FILE* out, const Options& opt, const std::vector<Lane>& lanes) {
  std::fprintf(out, "# fastsock-pipe %s, %s%s%s, %s elements (--api %s); sizes %zu..%zu, "
               "perturbation %d, %d trials per transport, interleaved\n",
               kVersion, mode_name(opt.mode), opt.integrity ? ", integrity check" : "",
               opt.cache_invalidate ? ", cache invalidated" : "", element_name(opt.element),
               opt.element == ElementType::byte ? "plain" : array_api_name(opt.api), opt.lower, opt.upper, opt.perturbation, opt.trials);
  for (const Lane& l : lanes)
    std::fprintf(out, "# %-10s %s%s\n", l.name.c_str(), l.status == "ok" ? "" : "SKIPPED: ",
                 l.status == "ok" ? l.description.c_str() : l.reason.c_str());
  std::fprintf(out, "# med/p99: %s time in microseconds; Mbit/s: mean of the trials (10^6 bit/s); "
               "x%s: median time relative to %s\n",
               opt.mode == Mode::pingpong ? "half round-trip" : "per-message",
               lanes.front().name.c_str(), lanes.front().name.c_str());
  std::fprintf(out, "%10s", "bytes");
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i].status == "skipped") continue;
    const std::string& n = lanes[i].name;
    std::fprintf(out, " | %9s %9s %10s", (n.substr(0, 5) + " med").c_str(), "p99", "Mbit/s");
    if (i > 0) std::fprintf(out, " %7s", ("x" + lanes.front().name.substr(0, 6)).c_str());
  }
  std::fprintf(out, "\n");
  std::fflush(out);
}

void compare_row(std::FILE* out, const std::vector<Lane>& lanes, std::size_t row) {
  const SizeStats* base = row_of(lanes.front(), row);
  std::size_t bytes = 0;
  for (const Lane& l : lanes)
    if (const SizeStats* s = row_of(l, row)) bytes = s->bytes;
  std::fprintf(out, "%10zu", bytes);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i].status == "skipped") continue;
    const SizeStats* s = row_of(lanes[i], row);
    if (s) std::fprintf(out, " | %9.2f %9.2f %10.1f", s->t_median * 1e6, s->t_p99 * 1e6, s->mbps_avg);
    else std::fprintf(out, " | %9s %9s %10s", "-", "-", "-");
    if (i == 0) continue;
    if (s && base && base->t_median > 0) std::fprintf(out, " %7.3f", s->t_median / base->t_median);
    else std::fprintf(out, " %7s", "-");
  }
  std::fprintf(out, "\n");
  std::fflush(out);
}

void compare_summary(std::FILE* out, const std::vector<Lane>& lanes, const RunInfo& info) {
  std::fprintf(out, "# %.1f s%s%s\n", info.wall_seconds, info.stopped_early ? "; stopped early: " : "",
               info.stopped_early ? info.stop_reason.c_str() : "");
  for (const Lane& l : lanes) {
    if (l.status == "skipped") {
      std::fprintf(out, "# %-10s skipped: %s\n", l.name.c_str(), l.reason.c_str());
      continue;
    }
    const RunSummary& s = l.result.summary;
    std::fprintf(out, "# %-10s %s%s%zu sizes; min latency %.2f us (%zu B), peak %.1f Mbit/s (%zu B)",
                 l.name.c_str(), l.status == "failed" ? "FAILED: " : "",
                 l.status == "failed" ? (l.reason + "; ").c_str() : "", l.result.sizes.size(),
                 s.min_latency * 1e6, s.min_latency_bytes, s.peak_mbps, s.peak_bytes);
    if (s.fit.valid)
      std::fprintf(out, "; Hockney t0 %.2f us, r_inf %.1f Mbit/s, n_half %.0f B", s.fit.t0 * 1e6,
                   s.fit.r_inf_mbps(), s.fit.n_half);
    else
      std::fprintf(out, "; no Hockney fit (%s)", kNoHockneyFitWhy);
    std::fprintf(out, "\n");
    if (!l.tx_path.empty()) std::fprintf(out, "# %-10s %s\n", l.name.c_str(), arrays_line(l).c_str());
  }
  std::fflush(out);
}

}  // namespace fastsock_pipe
