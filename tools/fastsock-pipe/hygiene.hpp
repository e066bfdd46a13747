// Conditions that make a measurement less trustworthy, printed at start and recorded in the
// JSON metadata: both ends on one core, fewer than 2 CPUs, a CPU frequency governor other
// than "performance", and loopback (which measures the local stack, not a network).
#pragma once

#include <string>
#include <vector>

#include "options.hpp"

namespace fastsock_pipe {

struct HostFacts {
  long cpus_online = 0;
  int cpus_allowed = 0;                    // in this process's affinity mask
  std::vector<std::string> governors;      // "cpuN=name" for every cpufreq policy found
};
HostFacts read_host_facts();

// Pure: the warnings for these options on a host with these facts.
std::vector<std::string> hygiene_warnings(const Options& opt, const HostFacts& host);

}  // namespace fastsock_pipe
