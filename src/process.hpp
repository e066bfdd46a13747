// Process lifecycle: fork and exec handling shared by the core's modules.
#pragma once

namespace fastsock {

// Like pthread_atfork, but run by our fork hook, so the order is known and they also run
// for vfork (which fastsock implements as fork, see ops_process.cc).
struct ForkHandlers {
  void (*prepare)() noexcept;   // before fork, in the parent (take locks)
  void (*parent)() noexcept;    // after fork, in the parent (release locks)
  void (*child)() noexcept;     // after fork, in the child (release or reset locks, re-publish)
};

// Registers handlers at static-initialisation time (a fixed table, no allocation).
void register_fork_handlers(const ForkHandlers& handlers) noexcept;

}  // namespace fastsock
