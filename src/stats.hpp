// The per-process statistics area (layout: stats_layout.hpp) as the library maintains it.
#pragma once

#include "stats_layout.hpp"

namespace fastsock::stats {

// A free slot of the published area, published on first use; nullptr when stats are
// disabled, the area cannot be created, or all slots are taken (counted as `untracked`).
Slot* claim_slot() noexcept;

// Returns a slot to the free pool (the connection's last descriptor closed).
void retire_slot(Slot* slot) noexcept;

// _exit/_Exit (no destructor runs): unlinks the name. Takes no lock and calls only
// async-signal-safe functions: the caller may be a signal handler, or a child forked while
// another thread held the library's locks.
void before_exit() noexcept;

// exec: the name is unlinked before the image is replaced; if exec fails, it comes back.
void before_exec() noexcept;
void after_failed_exec() noexcept;

// The path of this process's area, for messages and tests.
void area_path(int pid, char* out, unsigned long out_len) noexcept;

}  // namespace fastsock::stats
