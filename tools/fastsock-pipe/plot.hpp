// --plot PREFIX: latency-vs-size (log-log) and bandwidth-vs-size graphs of every measured
// transport, as SVG and PNG, drawn by gnuplot (Debian's gnuplot-nox). The gnuplot script,
// data included, is kept as PREFIX.gp so a graph can be redrawn or restyled.
#pragma once

#include <string>
#include <vector>

#include "driver.hpp"
#include "options.hpp"

namespace fastsock_pipe {

struct PlotResult {
  bool ok = true;                  // false: a file could not be written or gnuplot failed
  std::vector<std::string> files;  // written
  std::string skipped;             // what was not drawn and why (no gnuplot, no PNG terminal)
};

PlotResult write_plots(const std::string& prefix, const Options& opt, const std::vector<Lane>& lanes);

// The gnuplot script (pure, for tests): `png_terminal` is "pngcairo", "png" or "" for none.
std::string plot_script(const std::string& prefix, const Options& opt,
                        const std::vector<Lane>& lanes, const std::string& png_terminal);

}  // namespace fastsock_pipe
