#include "mem_watch.hpp"

#include <dlfcn.h>

// Defined next to the preload library's memory hooks; absent (null) in the tools and unit
// tests, whose frees nothing watches.
extern "C" void fastsock_memory_hooks() __attribute__((weak));

namespace fastsock::mem_watch {

namespace detail {
Callback g_callback = nullptr;
uintptr_t g_hi = 0;
}  // namespace detail

namespace {

using detail::g_callback;
using detail::g_hi;
uintptr_t g_lo = UINTPTR_MAX;  // __atomic builtins; the span is empty while lo >= hi

}  // namespace

void watch(Callback cb) noexcept {
  Callback none = nullptr;
  (void)__atomic_compare_exchange_n(&g_callback, &none, cb, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
}

void widen(uintptr_t lo, uintptr_t hi) noexcept {
  uintptr_t cur = __atomic_load_n(&g_lo, __ATOMIC_RELAXED);
  while (lo < cur && !__atomic_compare_exchange_n(&g_lo, &cur, lo, true, __ATOMIC_SEQ_CST,
                                                  __ATOMIC_RELAXED)) {
  }
  cur = __atomic_load_n(&g_hi, __ATOMIC_RELAXED);
  while (hi > cur && !__atomic_compare_exchange_n(&g_hi, &cur, hi, true, __ATOMIC_SEQ_CST,
                                                  __ATOMIC_RELAXED)) {
  }
}

void narrow(uintptr_t lo, uintptr_t hi) noexcept {
  if (lo >= hi) lo = UINTPTR_MAX, hi = 0;
  // The new span lies inside the old one, so a report that reads one bound before and the
  // other after these stores still covers it.
  __atomic_store_n(&g_hi, hi, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_lo, lo, __ATOMIC_SEQ_CST);
}

void changing(uintptr_t lo, uintptr_t hi) noexcept {
  const Callback cb = __atomic_load_n(&g_callback, __ATOMIC_ACQUIRE);
  if (!cb || hi <= lo) return;
  if (hi <= __atomic_load_n(&g_lo, __ATOMIC_SEQ_CST) || lo >= __atomic_load_n(&g_hi, __ATOMIC_SEQ_CST))
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
