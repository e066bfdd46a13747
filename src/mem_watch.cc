#include "mem_watch.hpp"

#include <dlfcn.h>

#include <atomic>

// Defined by the preload library's memory hooks; absent (null) in the tools and unit tests,
// whose frees nothing watches.
extern "C" void* fastsock_hooked_free_address() __attribute__((weak));

namespace fastsock::mem_watch {

namespace detail {
std::atomic<Callback> g_callback{nullptr};
}  // namespace detail

namespace {

using detail::g_callback;
std::atomic<uintptr_t> g_lo{UINTPTR_MAX}, g_hi{0};  // empty while lo >= hi

}  // namespace

void watch(Callback cb) noexcept {
  Callback none = nullptr;
  (void)g_callback.compare_exchange_strong(none, cb, std::memory_order_acq_rel);
}

void widen(uintptr_t lo, uintptr_t hi) noexcept {
  uintptr_t cur = g_lo.load(std::memory_order_relaxed);
  while (lo < cur && !g_lo.compare_exchange_weak(cur, lo, std::memory_order_seq_cst)) {
  }
  cur = g_hi.load(std::memory_order_relaxed);
  while (hi > cur && !g_hi.compare_exchange_weak(cur, hi, std::memory_order_seq_cst)) {
  }
}

void reset() noexcept {
  g_hi.store(0, std::memory_order_seq_cst);
  g_lo.store(UINTPTR_MAX, std::memory_order_seq_cst);
}

void changing(uintptr_t lo, uintptr_t hi) noexcept {
  const Callback cb = g_callback.load(std::memory_order_relaxed);
  if (!cb || hi <= lo) return;
  if (hi <= g_lo.load(std::memory_order_seq_cst) || lo >= g_hi.load(std::memory_order_seq_cst))
    return;
  cb(lo, hi);
}

bool frees_watched() noexcept {
  static const bool watched = [] {
    if (!fastsock_hooked_free_address) return false;
    return dlsym(RTLD_DEFAULT, "free") == fastsock_hooked_free_address();
  }();
  return watched;
}

}  // namespace fastsock::mem_watch
