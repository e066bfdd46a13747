#include "mem_watch.hpp"

#include <dlfcn.h>

#include <atomic>

// Defined next to the preload library's memory hooks; absent (null) in the tools and unit
// tests, whose frees nothing watches.
extern "C" void fastsock_memory_hooks() __attribute__((weak));

namespace fastsock::mem_watch {

namespace detail {
Callback g_callback = nullptr;
}  // namespace detail

namespace {

using detail::g_callback;
std::atomic<uintptr_t> g_lo{UINTPTR_MAX}, g_hi{0};  // empty while lo >= hi

}  // namespace

void watch(Callback cb) noexcept {
  Callback none = nullptr;
  (void)__atomic_compare_exchange_n(&g_callback, &none, cb, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
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
  const Callback cb = __atomic_load_n(&g_callback, __ATOMIC_ACQUIRE);
  if (!cb || hi <= lo) return;
  if (hi <= g_lo.load(std::memory_order_seq_cst) || lo >= g_hi.load(std::memory_order_seq_cst))
    return;
  cb(lo, hi);
}

bool frees_watched() noexcept {
  // The free every caller binds to is the first definition in the process's search order;
  // it is ours if it lies in the object holding these hooks. (Comparing with &free here
  // would not do: from inside the library, &free is that same first definition.)
  static const bool watched = [] {
    if (!fastsock_memory_hooks) return false;
    Dl_info used{}, ours{};
    void* f = dlsym(RTLD_DEFAULT, "free");
    return f && dladdr(f, &used) && dladdr(reinterpret_cast<void*>(&fastsock_memory_hooks), &ours) &&
           used.dli_fbase == ours.dli_fbase;
  }();
  return watched;
}

}  // namespace fastsock::mem_watch
