// --local --compare: the coordinator. Starts one worker per transport (session_remote.cc)
// and runs them all through one driver, their trials interleaved.
#pragma once

#include "options.hpp"

namespace fastsock_pipe {

// Returns the exit status: 2 for an unknown transport, 1 when none can run or one failed.
int run_compare(const Options& opt);

}  // namespace fastsock_pipe
