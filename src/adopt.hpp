// Sockets a process inherits through exec from a parent that ran fastsock (or not).
#pragma once

namespace fastsock {

// Enters every TCP socket this process already holds into the fd table, so connections that
// survive exec keep being tracked, counted and shown by `fastsock stat`. Runs once, on the
// first hooked call (see real.cc), never in a constructor.
void adopt_inherited_sockets() noexcept;

}  // namespace fastsock
