// The configuration a program started from this environment would get.
#pragma once

#include <string>

#include "config.hpp"

namespace fastsock::tool {

// Reads the whole file at `path` into `out`. On failure fills `error` with
// "<path>: <reason>" and returns false.
bool read_text_file(const std::string& path, std::string& out, std::string& error);

// config_from(getenv, <contents of $FASTSOCK_RULES>), i.e. what the library computes at
// start-up in a process with this environment. A rules file that cannot be read yields the
// same forced pass-through as a malformed one.
Config config_from_environment();

}  // namespace fastsock::tool
