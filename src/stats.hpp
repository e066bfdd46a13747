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

// set*uid: the file follows the effective uid the call is about to set (kUnchanged: none),
// so that the process can still unlink it at exit. /dev/shm is sticky: only the file's
// owner may remove it, and a root process that becomes `nobody` (an nginx worker) could
// not. Returns the owner to restore if the call fails (kUnchanged: nothing to undo).
inline constexpr unsigned kUnchanged = ~0u;
unsigned before_uid_change(unsigned new_euid) noexcept;
void after_failed_uid_change(unsigned old_owner) noexcept;

// The path of this process's area, for messages and tests.
void area_path(int pid, char* out, unsigned long out_len) noexcept;

}  // namespace fastsock::stats
