#include "compare_runs.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fastsock_pipe {
namespace {

using json = nlohmann::json;

constexpr int kNoRegression = 0, kRegression = 1, kBadInput = 2;

struct Point {
  double bytes, t_median, mbps_avg;
};
using Run = std::map<std::string, std::vector<Point>>;  // transport -> sizes in run order

// Reads and validates one saved run; false after printing why.
bool load(const char* path, Run& out) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "fastsock-pipe compare: cannot read %s: %s\n", path, std::strerror(errno));
    return false;
  }
  try {
    const json j = json::parse(f);
    if (j.at("schema") != "fastsock-pipe" || j.at("schema_version") != 2) {
      std::fprintf(stderr, "fastsock-pipe compare: %s: not a fastsock-pipe schema 2 file\n", path);
      return false;
    }
    for (const json& t : j.at("transports")) {
      std::vector<Point>& pts = out[t.at("name").get<std::string>()];
      for (const json& s : t.at("sizes")) {
        // null marks a value that was not finite: such a size cannot be compared.
        if (s.at("t_median").is_null() || s.at("mbps_avg").is_null()) continue;
        pts.push_back({s.at("bytes").get<double>(), s.at("t_median").get<double>(),
                       s.at("mbps_avg").get<double>()});
      }
    }
  } catch (const json::exception& e) {
    std::fprintf(stderr, "fastsock-pipe compare: %s: %s\n", path, e.what());
    return false;
  }
  return true;
}

bool parse_number(const char* s, double& v) {
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s, &end);
  return s && *s && errno == 0 && end && *end == '\0' && v >= 0;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "fastsock-pipe compare: %s\n"
               "Usage: fastsock-pipe compare A.json B.json [--threshold PCT] [--split BYTES]\n",
               why);
  return kBadInput;
}

}  // namespace

int compare_runs_main(int argc, char** argv) {
  double threshold = 10.0, split = 4096;
  std::vector<const char*> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      std::printf("Usage: fastsock-pipe compare A.json B.json [--threshold PCT] [--split BYTES]\n"
                  "Sizes <= split (default 4096 bytes) compare the median one-way time, larger\n"
                  "sizes the mean bandwidth. Exit 1 when B is slower than A by more than PCT\n"
                  "percent (default 10) at any size, 2 on bad input, 0 otherwise.\n");
      return kNoRegression;
    }
    if (a == "--threshold" || a == "--split") {
      double v = 0;
      if (i + 1 >= argc || !parse_number(argv[i + 1], v)) return usage(("bad " + a).c_str());
      (a == "--threshold" ? threshold : split) = v;
      ++i;
    } else if (a.rfind("--", 0) == 0) {
      return usage(("unknown option " + a).c_str());
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.size() != 2) return usage("expected two JSON files");
  Run a, b;
  if (!load(files[0], a) || !load(files[1], b)) return kBadInput;

  std::vector<std::pair<std::string, std::string>> pairs;  // transport in A, in B
  if (a.size() == 1 && b.size() == 1) pairs.emplace_back(a.begin()->first, b.begin()->first);
  else
    for (const auto& [name, pts] : a)
      if (b.count(name)) pairs.emplace_back(name, name);

  std::printf("# A = %s, B = %s; sizes <= %.0f bytes: median time, larger: mean bandwidth\n",
              files[0], files[1], split);
  std::printf("# regression %%: how much more time B needs than A; threshold %.1f %%\n", threshold);
  std::printf("%-12s %10s %-10s %12s %12s %10s\n", "transport", "bytes", "metric", "A", "B",
              "regr_%");
  std::size_t compared = 0, regressions = 0;
  double worst = -1e300;
  for (const auto& [na, nb] : pairs) {
    // Sizes can repeat in NetPIPE's schedule (-p 2): pair the k-th occurrence with the k-th.
    std::map<double, std::size_t> seen;
    std::multimap<double, const Point*> in_b;
    for (const Point& p : b[nb]) in_b.emplace(p.bytes, &p);
    for (const Point& p : a[na]) {
      const std::size_t k = seen[p.bytes]++;
      auto range = in_b.equal_range(p.bytes);
      auto it = range.first;
      for (std::size_t n = 0; n < k && it != range.second; ++n) ++it;
      if (it == range.second) continue;
      const Point& q = *it->second;
      const bool latency = p.bytes <= split;
      const double va = latency ? p.t_median * 1e6 : p.mbps_avg;
      const double vb = latency ? q.t_median * 1e6 : q.mbps_avg;
      if (!(va > 0 && vb > 0)) continue;
      const double regr = (latency ? vb / va : va / vb) * 100.0 - 100.0;
      const bool bad = regr > threshold;
      ++compared;
      regressions += bad;
      worst = std::max(worst, regr);
      std::printf("%-12s %10.0f %-10s %12.3f %12.3f %+10.2f%s\n", na == nb ? na.c_str() : (na + "/" + nb).c_str(),
                  p.bytes, latency ? "median_us" : "Mbit/s", va, vb, regr, bad ? "  REGRESSION" : "");
    }
  }
  if (compared == 0) {
    std::fprintf(stderr, "fastsock-pipe compare: the two runs have no transport and size in common\n");
    return kBadInput;
  }
  std::printf("# %zu sizes compared, %zu beyond the threshold; worst %+.2f %%\n", compared,
              regressions, worst);
  return regressions ? kRegression : kNoRegression;
}

}  // namespace fastsock_pipe
