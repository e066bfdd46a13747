// Tells a registration cache (transports/verbs/verbs_regcache.hpp) when the process gives
// memory back or replaces its pages: free, realloc, munmap, mremap, madvise, mmap with
// MAP_FIXED, shmdt, brk and sbrk are hooked (preload/hooks_memory.cc) and report the range
// they are about to change. A registration pins the pages a range had when it was made; if
// the range is unmapped and something else is mapped there, sending from the registration
// would send the old pages. The hooks cost one relaxed load per call while nothing is
// watched, and a range check against the watched span otherwise.
//
// Why free and realloc: glibc's allocator unmaps, remaps and trims (munmap, mremap, sbrk,
// MADV_DONTNEED) through internal calls that no hook of munmap sees. Every byte it gives
// back passed through free or realloc first, so a range freed there is reported as changed.
// That holds only when the process's free is the library's: a program whose allocator is
// linked into its executable, or an earlier preload defining free (AddressSanitizer), frees
// where no hook sees; `frees_watched()` says so and the cache then keeps nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastsock::mem_watch {

// Called with [lo, hi) before that range is given back or its pages replaced. Must not
// allocate, lock or log: it runs inside free and munmap, possibly from a signal handler.
using Callback = void (*)(uintptr_t lo, uintptr_t hi) noexcept;

// Sets the callback (once per process; later calls with another one are ignored).
void watch(Callback cb) noexcept;
// The callback is told about changes overlapping [lo, hi) from now on.
void widen(uintptr_t lo, uintptr_t hi) noexcept;
// Only changes overlapping [lo, hi) matter from now on (an empty range: none). Serialised
// with widen() by the caller; a report racing with it sees the old span or this one.
void narrow(uintptr_t lo, uintptr_t hi) noexcept;
// The hooks may run before anything is initialised — inside the dynamic loader's dlsym,
// before a sanitizer's runtime has mapped its shadow memory — so what they run before a
// callback is set is a plain load, never instrumented.
#define FASTSOCK_EARLY_SAFE __attribute__((no_sanitize("address", "undefined", "thread")))

namespace detail {
extern Callback g_callback;  // written and read with __atomic builtins
extern uintptr_t g_hi;       // the watched span's end (0: nothing watched), __atomic too
}
// Whether a callback is set: the hooks skip their own work (a heap block's size) otherwise.
// Inline: it is all that free() adds while nothing is watched.
FASTSOCK_EARLY_SAFE inline bool active() noexcept {
  return __atomic_load_n(&detail::g_callback, __ATOMIC_RELAXED) != nullptr;
}
// Whether a range starting at `p` may overlap the watched span: free() asks before it
// looks up the block's size.
FASTSOCK_EARLY_SAFE inline bool may_watch(const void* p) noexcept {
  return reinterpret_cast<uintptr_t>(p) < __atomic_load_n(&detail::g_hi, __ATOMIC_SEQ_CST);
}
// The hooks' entry: [lo, hi) is about to change.
void changing(uintptr_t lo, uintptr_t hi) noexcept;
inline void changing(const void* addr, size_t len) noexcept {
  const auto lo = reinterpret_cast<uintptr_t>(addr);
  changing(lo, lo + len);
}
// Whether this process's free() is the library's hook (see above).
bool frees_watched() noexcept;

}  // namespace fastsock::mem_watch
