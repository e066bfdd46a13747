// The worker role of --compare (hidden option --worker IN,OUT): runs one transport's
// transmitter as told by the coordinator over the pipes IN and OUT.
#pragma once

#include "options.hpp"

namespace fastsock_pipe {

int run_worker(const Options& opt);

}  // namespace fastsock_pipe
