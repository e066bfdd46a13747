#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "cache_size.hpp"
#include "hygiene.hpp"
#include "output.hpp"

namespace fastsock_pipe {

Metadata collect_metadata(const Options& opt) {
  Metadata m;
  utsname u{};
  if (uname(&u) == 0) {
    m.host = u.nodename;
    m.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  const HostFacts facts = read_host_facts();
  m.cpus_online = facts.cpus_online;
  m.warnings = hygiene_warnings(opt, facts);
  timespec res{};
  if (clock_getres(CLOCK_MONOTONIC, &res) == 0)
    m.clock_resolution_ns = res.tv_sec * 1000000000L + res.tv_nsec;
  time_t now = time(nullptr);
  tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  m.started_at = buf;
  // Which socket library (if any) this process ran under; --compare records each
  // transport's own LD_PRELOAD with its results.
  if (const char* p = std::getenv("LD_PRELOAD")) m.ld_preload = p;
  if (opt.cache_invalidate) m.cache_bytes = cache_bytes_to_exceed(opt.cache_bytes);
  return m;
}

}  // namespace fastsock_pipe
