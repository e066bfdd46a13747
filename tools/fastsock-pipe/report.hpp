// A transmitter run from start to finish: hygiene warnings, the live table and progress,
// the driver, then every output file the options ask for.
#pragma once

#include <vector>

#include "driver.hpp"
#include "options.hpp"

namespace fastsock_pipe {

// Runs `lanes` (one, or one per --compare transport) and reports. Returns the exit status:
// 0, or 1 after a failed lane, an integrity failure or a file that could not be written.
int measure_and_report(std::vector<Lane>& lanes, const Options& opt);

}  // namespace fastsock_pipe
