#include "report.hpp"

#include <cstdio>
#include <string>

#include "endpoint.hpp"
#include "output.hpp"
#include "plot.hpp"
#include "progress.hpp"

namespace fastsock_pipe {
namespace {

constexpr int kExitOk = 0, kExitFailure = 1;

}  // namespace

// Runs the lanes, prints the live table and writes every requested file.
int measure_and_report(std::vector<Lane>& lanes, const Options& opt) {
  const Metadata meta = collect_metadata(opt);
  for (const std::string& w : meta.warnings) std::fprintf(stderr, "fastsock-pipe: warning: %s\n", w.c_str());
  const bool single = lanes.size() == 1;
  if (!opt.quiet) {
    if (single) table_header(stdout, opt);
    else compare_header(stdout, opt, lanes);
  }
  Progress progress(opt.progress, now_seconds());
  std::size_t rows = 0;
  auto on_row = [&](std::size_t index, std::size_t total) {
    progress.clear();
    if (!opt.quiet) {
      if (single && !lanes[0].result.sizes.empty()) table_row(stdout, lanes[0].result.sizes.back(), index);
      else if (!single) compare_row(stdout, lanes, rows);
    }
    std::size_t bytes = 0;
    for (const Lane& l : lanes)
      if (rows < l.result.sizes.size()) bytes = l.result.sizes[rows].bytes;
    ++rows;
    progress.update(index + 1, total, bytes);
  };
  RunInfo info;
  const bool ok = run_lanes(lanes, opt, on_row, info);
  progress.finish();
  if (!ok && single) return kExitFailure;
  if (!opt.quiet) {
    if (single) table_summary(stdout, lanes[0], info);
    else compare_summary(stdout, lanes, info);
  }
  bool written = true;
  if (!opt.csv_path.empty()) written &= write_csv(opt.csv_path, opt, lanes);
  if (!opt.json_path.empty()) written &= write_json(opt.json_path, meta, opt, lanes, info);
  if (!opt.npout_path.empty()) {
    for (const Lane& l : lanes)
      if (l.status != "skipped")
        written &= write_npout(single ? opt.npout_path : opt.npout_path + "." + l.name, opt, l.result);
  }
  if (!opt.plot_prefix.empty()) {
    const PlotResult p = write_plots(opt.plot_prefix, opt, lanes);
    for (const std::string& f : p.files) std::printf("# plot: %s\n", f.c_str());
    if (!p.skipped.empty()) std::printf("# plot skipped: %s\n", p.skipped.c_str());
    written &= p.ok;
  }
  int rc = written ? kExitOk : kExitFailure;
  for (const Lane& l : lanes) {
    if (l.result.integrity_failed) {
      std::fprintf(stderr, "fastsock-pipe: %s%s%s\n", single ? "" : l.name.c_str(),
                   single ? "" : ": ", l.result.integrity_message.c_str());
      rc = kExitFailure;
    } else if (opt.integrity && !opt.quiet && l.status == "ok") {
      std::printf("# %s%sintegrity check passed at all %zu sizes\n", single ? "" : l.name.c_str(),
                  single ? "" : ": ", l.result.sizes.size());
    }
    if (l.status == "failed") rc = kExitFailure;
  }
  return rc;
}

}  // namespace fastsock_pipe
