#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "output.hpp"

namespace fastsock_pipe {
namespace {

using json = nlohmann::ordered_json;

// Version of the layout below (docs/fastsock-pipe.md); bump it when a field changes meaning
// or disappears. 2: per-transport results under "transports", "comparison", warnings.
constexpr int kSchemaVersion = 2;

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json size_json(const SizeStats& s, std::size_t esize) {
  return {{"bytes", s.bytes},           {"elements", s.bytes / esize},
          {"repeats", s.repeats},       {"trials", s.trials},
          {"t_min", num(s.t_min)},      {"t_median", num(s.t_median)},
          {"t_p99", num(s.t_p99)},      {"t_max", num(s.t_max)},
          {"t_best_trial", num(s.t_best_trial)}, {"t_avg_trial", num(s.t_avg_trial)},
          {"mbps_min", num(s.mbps_min)}, {"mbps_avg", num(s.mbps_avg)},
          {"mbps_max", num(s.mbps_max)}, {"trial_starts", s.trial_starts}};
}

json summary_json(const RunSummary& s) {
  json j = {{"min_latency", num(s.min_latency)}, {"min_latency_bytes", s.min_latency_bytes},
            {"peak_mbps", num(s.peak_mbps)},     {"peak_bytes", s.peak_bytes}};
  if (s.fit.valid)
    j["hockney"] = {{"t0", num(s.fit.t0)}, {"r_inf_mbps", num(s.fit.r_inf_mbps())},
                    {"n_half", num(s.fit.n_half)}};
  else
    j["hockney"] = nullptr;
  return j;
}

// How each end moved its messages (plain, library, shim, portable) and the fastsock
// transport it saw (null: none); null before the first size completed.
json arrays_json(const Lane& l) {
  if (l.tx_path.empty()) return nullptr;
  auto end = [](const std::string& path, const std::string& transport) {
    return json{{"path", path}, {"transport", transport.empty() ? json(nullptr) : json(transport)}};
  };
  return {{"transmitter", end(l.tx_path, l.tx_transport)},
          {"receiver", end(l.rx_path, l.rx_transport)}};
}

json lane_json(const Lane& l, std::size_t esize) {
  json sizes = json::array();
  for (const SizeStats& s : l.result.sizes) sizes.push_back(size_json(s, esize));
  return {{"name", l.name},
          {"description", l.description},
          {"ld_preload", l.ld_preload},
          {"status", l.status},
          {"reason", l.reason},
          {"sizes", sizes},
          {"summary", summary_json(l.result.summary)},
          {"integrity_failed", l.result.integrity_failed},
          {"integrity_message", l.result.integrity_message},
          {"arrays", arrays_json(l)}};
}

double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

// Per size, each transport's median, p99 and bandwidth with their ratios to the first
// transport (time ratios > 1 and bandwidth ratios < 1 mean slower than the first).
json comparison_json(const std::vector<Lane>& lanes) {
  json rows = json::array();
  std::size_t nrows = 0;
  for (const Lane& l : lanes) nrows = std::max(nrows, l.result.sizes.size());
  const auto& base = lanes.front().result.sizes;
  for (std::size_t r = 0; r < nrows; ++r) {
    json entries = json::object();
    std::size_t bytes = 0;
    for (const Lane& l : lanes) {
      if (r >= l.result.sizes.size()) continue;
      const SizeStats& s = l.result.sizes[r];
      bytes = s.bytes;
      json e = {{"t_median", num(s.t_median)}, {"t_p99", num(s.t_p99)}, {"mbps_avg", num(s.mbps_avg)}};
      if (r < base.size()) {
        e["ratio_t_median"] = num(ratio(s.t_median, base[r].t_median));
        e["ratio_t_p99"] = num(ratio(s.t_p99, base[r].t_p99));
        e["ratio_mbps_avg"] = num(ratio(s.mbps_avg, base[r].mbps_avg));
      }
      entries[l.name] = e;
    }
    rows.push_back({{"bytes", bytes}, {"transports", entries}});
  }
  return {{"baseline", lanes.front().name}, {"sizes", rows}};
}

}  // namespace

bool write_json(const std::string& path, const Metadata& m, const Options& o,
                const std::vector<Lane>& lanes, const RunInfo& info) {
  const std::size_t esize = element_size(o.element);
  json meta = {{"host", m.host},
               {"kernel", m.kernel},
               {"cpu_model", m.cpu_model},
               {"cpus_online", m.cpus_online},
               {"started_at", m.started_at},
               {"ld_preload", m.ld_preload},
               {"clock", {{"source", "CLOCK_MONOTONIC"}, {"resolution_ns", m.clock_resolution_ns}}}};
  meta["pinning"] = o.pin ? json{{"transmitter_cpu", o.cpu_tx}, {"receiver_cpu", o.cpu_rx}}
                          : json(nullptr);
  meta["cache_bytes"] = o.cache_invalidate ? json(m.cache_bytes) : json(nullptr);
  meta["warnings"] = m.warnings;
  json transports = json::array();
  bool integrity_failed = false;
  for (const Lane& l : lanes) {
    transports.push_back(lane_json(l, esize));
    integrity_failed = integrity_failed || l.result.integrity_failed;
  }
  json j = {{"schema", "fastsock-pipe"}, {"schema_version", kSchemaVersion},
            {"tool_version", kVersion},  {"metadata", meta}};
  j["options"] = {{"role", o.role == Role::local ? "local" : "transmitter"},
                  {"host", o.role == Role::local ? "" : o.host},
                  {"port", o.port},
                  {"lower", o.lower},
                  {"upper", o.upper},
                  {"perturbation", o.perturbation},
                  {"socket_buffer", o.socket_buffer},
                  {"trials", o.trials},
                  {"trial_time_s", o.trial_time},
                  {"max_time_s", o.max_time},
                  {"mode", mode_name(o.mode)},
                  {"integrity", o.integrity},
                  {"cache_invalidate", o.cache_invalidate},
                  {"element_type", element_name(o.element)},
                  {"element_size", esize},
                  {"api", o.element == ElementType::byte ? "plain" : array_api_name(o.api)},
                  {"compare", o.compare}};
  j["units"] = {{"time", "s"}, {"bandwidth", "Mbit/s (10^6 bit/s)"}, {"r_inf", "Mbit/s"},
                {"n_half", "bytes"}};
  j["transports"] = transports;
  j["comparison"] = lanes.size() > 1 ? comparison_json(lanes) : json(nullptr);
  j["stopped_early"] = info.stopped_early;
  j["stop_reason"] = info.stop_reason;
  j["integrity_failed"] = integrity_failed;
  j["wall_seconds"] = info.wall_seconds;

  std::ofstream f(path);
  f << j.dump(1) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "fastsock-pipe: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace fastsock_pipe
