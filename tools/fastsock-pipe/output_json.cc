#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include "output.hpp"

namespace fastsock_pipe {
namespace {

// Version of the JSON layout below; bump it when a field changes meaning or disappears.
constexpr int kSchemaVersion = 1;

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

bool write_json(const std::string& path, const Metadata& m, const Options& o, const RunResult& r) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "fastsock-pipe: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  const char* role = o.role == Role::local ? "local" : "transmitter";
  std::fprintf(f, "{\n  \"schema\": \"fastsock-pipe\",\n  \"schema_version\": %d,\n", kSchemaVersion);
  std::fprintf(f, "  \"tool_version\": %s,\n", quote(kVersion).c_str());
  std::fprintf(f, "  \"metadata\": {\n    \"host\": %s,\n    \"kernel\": %s,\n    \"cpu_model\": %s,\n",
               quote(m.host).c_str(), quote(m.kernel).c_str(), quote(m.cpu_model).c_str());
  std::fprintf(f, "    \"cpus_online\": %ld,\n    \"started_at\": %s,\n    \"ld_preload\": %s,\n",
               m.cpus_online, quote(m.started_at).c_str(), quote(m.ld_preload).c_str());
  std::fprintf(f, "    \"clock\": {\"source\": \"CLOCK_MONOTONIC\", \"resolution_ns\": %ld},\n",
               m.clock_resolution_ns);
  if (o.pin)
    std::fprintf(f, "    \"pinning\": {\"transmitter_cpu\": %d, \"receiver_cpu\": %d},\n", o.cpu_tx,
                 o.cpu_rx);
  else
    std::fprintf(f, "    \"pinning\": null,\n");
  std::fprintf(f, "    \"transport\": \"tcp\"\n  },\n");
  std::fprintf(f,
               "  \"options\": {\"role\": %s, \"host\": %s, \"port\": %d, \"lower\": %zu, "
               "\"upper\": %zu, \"perturbation\": %d, \"trials\": %d, \"trial_time_s\": %s, "
               "\"max_time_s\": %s, \"mode\": %s, \"integrity\": %s},\n",
               quote(role).c_str(), quote(o.role == Role::local ? "127.0.0.1" : o.host).c_str(),
               o.port, o.lower, o.upper, o.perturbation, o.trials, num(o.trial_time).c_str(),
               num(o.max_time).c_str(), quote(o.stream ? "stream" : "pingpong").c_str(),
               o.integrity ? "true" : "false");
  std::fprintf(f, "  \"units\": {\"time\": \"s\", \"bandwidth\": \"Mbit/s (10^6 bit/s)\", "
               "\"r_inf\": \"Mbit/s\", \"n_half\": \"bytes\"},\n");
  std::fprintf(f, "  \"sizes\": [");
  for (std::size_t i = 0; i < r.sizes.size(); ++i) {
    const SizeStats& s = r.sizes[i];
    std::fprintf(f,
                 "%s\n    {\"bytes\": %zu, \"repeats\": %ld, \"trials\": %d, \"t_min\": %s, "
                 "\"t_median\": %s, \"t_p99\": %s, \"t_max\": %s, \"t_best_trial\": %s, "
                 "\"mbps_min\": %s, \"mbps_avg\": %s, \"mbps_max\": %s}",
                 i ? "," : "", s.bytes, s.repeats, s.trials, num(s.t_min).c_str(),
                 num(s.t_median).c_str(), num(s.t_p99).c_str(), num(s.t_max).c_str(),
                 num(s.t_best_trial).c_str(), num(s.mbps_min).c_str(), num(s.mbps_avg).c_str(),
                 num(s.mbps_max).c_str());
  }
  std::fprintf(f, "\n  ],\n");
  const RunSummary& s = r.summary;
  std::fprintf(f,
               "  \"summary\": {\"min_latency\": %s, \"min_latency_bytes\": %zu, "
               "\"peak_mbps\": %s, \"peak_bytes\": %zu, ",
               num(s.min_latency).c_str(), s.min_latency_bytes, num(s.peak_mbps).c_str(),
               s.peak_bytes);
  if (s.fit.valid)
    std::fprintf(f, "\"hockney\": {\"t0\": %s, \"r_inf_mbps\": %s, \"n_half\": %s}},\n",
                 num(s.fit.t0).c_str(), num(s.fit.r_inf_mbps()).c_str(), num(s.fit.n_half).c_str());
  else
    std::fprintf(f, "\"hockney\": null},\n");
  std::fprintf(f, "  \"stopped_early\": %s,\n  \"stop_reason\": %s,\n",
               r.stopped_early ? "true" : "false", quote(r.stop_reason).c_str());
  std::fprintf(f, "  \"integrity_failed\": %s,\n  \"integrity_message\": %s,\n",
               r.integrity_failed ? "true" : "false", quote(r.integrity_message).c_str());
  std::fprintf(f, "  \"wall_seconds\": %s\n}\n", num(r.wall_seconds).c_str());
  return std::fclose(f) == 0;
}

}  // namespace fastsock_pipe
