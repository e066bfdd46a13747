// current_pid (shm_process.hpp).
#include "shm_process.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace fastsock::shm {

namespace {

std::atomic<pid_t> g_pid{0};

void forget_pid() noexcept { g_pid.store(0, std::memory_order_relaxed); }

}  // namespace

pid_t current_pid() noexcept {
  const pid_t cached = g_pid.load(std::memory_order_relaxed);
  if (cached != 0) return cached;
  // Registered before the first value is cached, so no fork can copy a value that will not
  // be cleared. (A forked child inherits the registration and the initialised static.)
  static const bool registered = pthread_atfork(nullptr, nullptr, forget_pid) == 0;
  const pid_t pid = ::getpid();
  if (registered) g_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

}  // namespace fastsock::shm
