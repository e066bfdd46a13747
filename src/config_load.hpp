// The process's configuration, loaded once on first use (never in a constructor).
#pragma once

#include "config.hpp"

namespace fastsock {

// Reads FASTSOCK_* and the rules file the first time it is called; afterwards a load.
// A malformed setting is reported once on stderr and yields the pass-through config.
const Config& config() noexcept;

// The application's short program name, for rule matching and stats.
const char* program_name() noexcept;

}  // namespace fastsock
