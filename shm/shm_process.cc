// current_pid (shm_process.hpp).
#include "shm_process.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

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

namespace {

// The cached identity, tagged with the generation it was read in, plus one (0: nothing
// cached): bits 33-63 the tag, bit 32 "the real uid differs", bits 0-31 the effective uid.
// A value read while a forget ran carries the old generation and never matches again.
std::atomic<uint32_t> g_uid_generation{0};
std::atomic<uint64_t> g_identity{0};

constexpr uint64_t kRealDiffers = uint64_t(1) << 32;

uint64_t identity() noexcept {
  // The value first, then the generation: a forget that finished before this call began
  // is always seen.
  const uint64_t cached = g_identity.load(std::memory_order_acquire);
  const uint32_t generation = g_uid_generation.load(std::memory_order_acquire);
  const uint64_t tag = uint64_t((generation + 1) & 0x7fffffffu) << 33;
  if ((cached & ~((uint64_t(1) << 33) - 1)) == tag && tag != 0) return cached;
  const uid_t euid = ::geteuid();
  const uint64_t fresh = tag | (::getuid() != euid ? kRealDiffers : 0) | uint32_t(euid);
  g_identity.store(fresh, std::memory_order_release);
  return fresh;
}

}  // namespace

uid_t effective_uid() noexcept { return uid_t(uint32_t(identity())); }

bool real_uid_differs() noexcept { return (identity() & kRealDiffers) != 0; }

void forget_effective_uid() noexcept {
  g_uid_generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace fastsock::shm
