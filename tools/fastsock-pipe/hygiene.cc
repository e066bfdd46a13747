#include "hygiene.hpp"

#include <glob.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>

namespace fastsock_pipe {
namespace {

bool is_loopback_host(const std::string& h) {
  return h.rfind("unix:", 0) == 0 || h.rfind("127.", 0) == 0 || h == "::1" || h == "localhost" ||
         h == "ip6-localhost" || h.rfind("::ffff:127.", 0) == 0;
}

}  // namespace

HostFacts read_host_facts() {
  HostFacts f;
  f.cpus_online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) f.cpus_allowed = CPU_COUNT(&set);
  glob_t g{};
  if (glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor", 0, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) {
      std::ifstream in(g.gl_pathv[i]);
      std::string name;
      if (!(in >> name)) continue;
      const std::string path = g.gl_pathv[i];
      const std::size_t a = path.find("/cpu", 20) + 1, b = path.find('/', a);
      f.governors.push_back(path.substr(a, b - a) + "=" + name);
    }
  }
  globfree(&g);
  return f;
}

std::vector<std::string> hygiene_warnings(const Options& opt, const HostFacts& host) {
  std::vector<std::string> w;
  const bool local = opt.role == Role::local || opt.role == Role::worker;
  if (host.cpus_online < 2)
    w.push_back("fewer than 2 CPUs online (" + std::to_string(host.cpus_online) +
                "): both ends and the kernel share one CPU");
  if (local && opt.pin && opt.cpu_tx == opt.cpu_rx)
    w.push_back("both ends pinned to the same CPU " + std::to_string(opt.cpu_tx));
  else if (local && !opt.pin && host.cpus_allowed == 1 && host.cpus_online >= 2)
    w.push_back("this process may only run on one CPU: both ends share it");
  std::string slow;
  for (const std::string& g : host.governors)
    if (g.substr(g.find('=') + 1) != "performance") slow += (slow.empty() ? "" : ", ") + g;
  if (!slow.empty())
    w.push_back("CPU frequency governor is not 'performance' (" + slow +
                "): frequency changes add noise");
  if (local || is_loopback_host(opt.host))
    w.push_back("loopback: this measures the local socket stack and memory copies, not a network");
  return w;
}

}  // namespace fastsock_pipe
