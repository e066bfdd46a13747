#include "plot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace fastsock_pipe {
namespace {

// Runs gnuplot with `args`, its output discarded unless `show_errors`; true on exit 0.
bool run_gnuplot(const std::vector<std::string>& args, bool show_errors) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>("gnuplot"));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  if (!show_errors) posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool gnuplot_found() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && access((d + "/gnuplot").c_str(), X_OK) == 0) return true;
  return false;
}

// gnuplot strings are double-quoted; file names and labels come from the user.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// x tics at powers of 4 across the measured sizes, labelled 1 B, 4 B, ... 1 KiB, 4 KiB, ...
std::string size_tics(const std::vector<Lane>& lanes) {
  std::size_t hi = 1;
  for (const Lane& l : lanes)
    for (const SizeStats& s : l.result.sizes) hi = std::max(hi, s.bytes);
  std::ostringstream o;
  o << "set xtics (";
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  for (std::size_t v = 1, i = 0; v <= hi * 2; v *= 4, i += 2) {
    o << (v > 1 ? ", " : "") << "\"" << (v >> (10 * (i / 10))) << " " << units[i / 10] << "\" " << v;
  }
  o << ")\n";
  return o.str();
}

const char* time_label(Mode m) {
  switch (m) {
    case Mode::pingpong: return "half round-trip time (µs; median solid, p99 dashed)";
    case Mode::stream: return "time per message (µs; median solid, p99 dashed)";
    case Mode::bidirectional: return "time per exchange (µs; median solid, p99 dashed)";
  }
  return "time (µs)";
}

}  // namespace

std::string plot_script(const std::string& prefix, const Options& opt,
                        const std::vector<Lane>& lanes, const std::string& png_terminal) {
  double peak = 0;
  for (const Lane& l : lanes)
    for (const SizeStats& s : l.result.sizes) peak = std::max(peak, s.mbps_max);
  // Decimal units; Gbit/s once the curves reach 1000 Mbit/s, so the axis stays readable.
  const bool gbit = peak >= 1000;
  const double scale = gbit ? 1e-3 : 1.0;
  std::ostringstream o;
  o << "# fastsock-pipe " << kVersion << ": graphs of " << prefix << " (gnuplot script)\n";
  o << "set encoding utf8\n";
  std::vector<const Lane*> drawn;
  for (const Lane& l : lanes)
    if (!l.result.sizes.empty()) drawn.push_back(&l);
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    // Columns: bytes, median time (µs), p99 time (µs), mean bandwidth (plot unit).
    o << "$d" << i << " << EOD\n";
    for (const SizeStats& s : drawn[i]->result.sizes)
      o << s.bytes << " " << s.t_median * 1e6 << " " << s.t_p99 * 1e6 << " "
        << s.mbps_avg * scale << "\n";
    o << "EOD\n";
  }
  const char* mode_label = opt.mode == Mode::pingpong ? "ping-pong, half round trip"
                           : opt.mode == Mode::stream ? "streaming"
                                                      : "bidirectional";
  const std::string what = std::string(mode_label) +
                           (opt.cache_invalidate ? ", cache invalidated" : "") +
                           (opt.element != ElementType::byte
                                ? std::string(", ") + element_name(opt.element) + " arrays"
                                : "");
  o << "set grid\nset key top left box opaque\nset logscale x 2\n"
    << "set xlabel \"message size (bytes; KiB = 1024 B, MiB = 1024 KiB)\"\n" << size_tics(lanes);
  const std::string bw_unit = gbit ? "Gbit/s" : "Mbit/s";
  struct Graph {
    const char* name;
    std::string title, ylabel;
    bool logy;
  };
  const Graph graphs[] = {
      {"latency", "fastsock-pipe: latency vs message size (" + what + ")", time_label(opt.mode), true},
      {"bandwidth", "fastsock-pipe: bandwidth vs message size (" + what + ")",
       "bandwidth, mean of trials (" + bw_unit + ", decimal)", false},
  };
  std::vector<std::pair<std::string, std::string>> terminals = {
      {"svg", "set terminal svg size 960,600 dynamic enhanced font \"Sans,13\" background \"white\""}};
  if (!png_terminal.empty())
    terminals.push_back({"png", "set terminal " + png_terminal +
                                    " size 1280,800 enhanced font \"Sans,13\" background \"white\""});
  for (const Graph& g : graphs) {
    o << "set title " << quoted(g.title) << "\nset ylabel " << quoted(g.ylabel) << "\n";
    o << (g.logy ? "set logscale y 10\n" : "unset logscale y\nset yrange [0:*]\n");
    for (const auto& [ext, term] : terminals) {
      o << term << "\nset output " << quoted(prefix + "-" + g.name + "." + ext) << "\nplot ";
      for (std::size_t i = 0; i < drawn.size(); ++i) {
        const std::string n = drawn[i]->name;
        const int style = static_cast<int>(i % 8) + 1;  // distinct colour and point type
        if (i) o << ", \\\n     ";
        if (g.logy) {
          o << "$d" << i << " using 1:2 with linespoints lc " << style << " pt " << style
            << " lw 2 title " << quoted(n + " median") << ", \\\n     $d" << i
            << " using 1:3 with lines lc " << style << " dt 2 title " << quoted(n + " p99");
        } else {
          o << "$d" << i << " using 1:4 with linespoints lc " << style << " pt " << style
            << " lw 2 title " << quoted(n);
        }
      }
      o << "\nset output\n";
    }
    o << "set autoscale y\n";
  }
  return o.str();
}

PlotResult write_plots(const std::string& prefix, const Options& opt, const std::vector<Lane>& lanes) {
  PlotResult r;
  if (!gnuplot_found()) {
    r.skipped = "gnuplot not found in PATH (Debian: apt-get install gnuplot-nox)";
    return r;
  }
  std::string png;
  for (const char* t : {"pngcairo", "png"}) {
    if (run_gnuplot({"-e", std::string("set terminal ") + t}, false)) {
      png = t;
      break;
    }
  }
  if (png.empty()) r.skipped = "PNG: this gnuplot has neither the pngcairo nor the png terminal";
  const std::string script_path = prefix + ".gp";
  {
    std::ofstream f(script_path);
    f << plot_script(prefix, opt, lanes, png);
    if (!f) {
      std::fprintf(stderr, "fastsock-pipe: cannot write %s\n", script_path.c_str());
      r.ok = false;
      return r;
    }
  }
  if (!run_gnuplot({script_path}, true)) {
    std::fprintf(stderr, "fastsock-pipe: gnuplot failed on %s\n", script_path.c_str());
    r.ok = false;
    return r;
  }
  for (const char* g : {"latency", "bandwidth"})
    for (const char* ext : {"svg", "png"})
      if (std::string(ext) == "svg" || !png.empty()) r.files.push_back(prefix + "-" + g + "." + ext);
  r.files.push_back(script_path);
  return r;
}

}  // namespace fastsock_pipe
