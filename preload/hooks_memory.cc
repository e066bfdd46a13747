// Exported hooks of the calls that give memory back or replace its pages (src/mem_watch.hpp):
// each reports the range it is about to change, then does exactly what the next definition
// (the allocator's, or libc's) does. Until the registration cache is first used the report
// is one relaxed load; after, a free of a block that starts above what the cache covers
// costs one more.
//
// These run from the first free of the process on, before any constructor and inside the
// loader's own calls (dlsym frees its error state): until a callback is set they do only
// plain loads and the lookup of the next definition, nothing a sanitizer instruments
// (FASTSOCK_EARLY_SAFE) — an instrumented load before the sanitizer's runtime has set up
// its shadow memory crashes.
#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>

#include "hook.hpp"
#include "mem_watch.hpp"

namespace {

using namespace fastsock;

// The next definition of `name`, resolved by the constructor below, or at first use when
// that comes earlier. dlsym may itself free or realloc a block (its error state): a call
// made while its own resolution is under way gets nullptr, and free then leaves that block
// allocated — once per process, a few bytes.
template <typename Fn>
class Next {
 public:
  explicit constexpr Next(const char* name) : name_(name) {}
  FASTSOCK_EARLY_SAFE Fn get() noexcept {
    if (Fn f = __atomic_load_n(&fn_, __ATOMIC_ACQUIRE)) return f;
    if (__atomic_exchange_n(&resolving_, true, __ATOMIC_ACQ_REL)) return nullptr;
    Fn f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name_));
    __atomic_store_n(&fn_, f, __ATOMIC_RELEASE);
    __atomic_store_n(&resolving_, false, __ATOMIC_RELEASE);
    return f;
  }

 private:
  const char* name_;
  Fn fn_ = nullptr;        // __atomic builtins only (see above)
  bool resolving_ = false;
};

Next<void (*)(void*)> next_free("free");
Next<void* (*)(void*, size_t)> next_realloc("realloc");
Next<void* (*)(void*, size_t, size_t)> next_reallocarray("reallocarray");
Next<size_t (*)(void*)> next_usable_size("malloc_usable_size");
Next<int (*)(void*, size_t)> next_munmap("munmap");
Next<void* (*)(void*, size_t, size_t, int, ...)> next_mremap("mremap");
Next<int (*)(void*, size_t, int)> next_madvise("madvise");
Next<void* (*)(void*, size_t, int, int, int, off_t)> next_mmap("mmap");
Next<void* (*)(void*, size_t, int, int, int, off64_t)> next_mmap64("mmap64");
Next<int (*)(const void*)> next_shmdt("shmdt");
Next<int (*)(void*)> next_brk("brk");
Next<void* (*)(intptr_t)> next_sbrk("sbrk");

// A heap block about to be freed or moved: the allocator may give its pages back. Its size
// is looked up only when it starts below the watched span's end.
FASTSOCK_EARLY_SAFE void block_changing(void* p) noexcept {
  if (!p || !mem_watch::active() || !mem_watch::may_watch(p)) return;
  if (auto usable = next_usable_size.get()) mem_watch::changing(p, usable(p));
}

// [addr, addr + len rounded up to pages) is about to change (only once a callback is set).
FASTSOCK_EARLY_SAFE void pages_changing(const void* addr, size_t len) noexcept {
  if (!mem_watch::active()) return;
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  mem_watch::changing(addr, (len + page - 1) & ~(page - 1));
}

// The advice that drops or replaces a range's pages (the next touch maps other ones).
bool replaces_pages(int advice) noexcept {
  switch (advice) {
    case MADV_DONTNEED:
    case MADV_FREE:
    case MADV_REMOVE:
#ifdef MADV_DONTNEED_LOCKED
    case MADV_DONTNEED_LOCKED:
#endif
      return true;
    default:
      return false;
  }
}

// Every next definition, resolved as soon as this library is initialised rather than at
// each hook's first call. A first call can come from inside glibc's dlerror(): it formats
// its message with asprintf, which calls realloc (and gettext calls free), and a dlsym made
// there runs glibc's _dlerror_run, which frees the very result object dlerror is about to
// write its message pointer into — heap corruption that crashed wrk at its exit (its first
// realloc came after the vendor link's failed dlopen; tests/preload/progs/dlerror_first.c).
// Calls made before this constructor (other libraries' constructors) still resolve lazily.
__attribute__((constructor(101))) FASTSOCK_EARLY_SAFE void resolve_next_definitions() noexcept {
  next_free.get();
  next_realloc.get();
  next_reallocarray.get();
  next_usable_size.get();
  next_munmap.get();
  next_mremap.get();
  next_madvise.get();
  next_mmap.get();
  next_mmap64.get();
  next_shmdt.get();
  next_brk.get();
  next_sbrk.get();
}

}  // namespace

// Marks the object that holds these hooks (mem_watch::frees_watched).
extern "C" void fastsock_memory_hooks() {}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void free(void* p) noexcept {
  block_changing(p);
  if (auto f = next_free.get()) f(p);
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void* realloc(void* p, size_t size) noexcept {
  block_changing(p);
  if (auto f = next_realloc.get()) return f(p, size);
  errno = ENOMEM;
  return nullptr;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void* reallocarray(void* p, size_t n, size_t size) noexcept {
  block_changing(p);
  if (auto f = next_reallocarray.get()) return f(p, n, size);
  errno = ENOMEM;
  return nullptr;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int munmap(void* addr, size_t len) noexcept {
  pages_changing(addr, len);
  if (auto f = next_munmap.get()) return f(addr, len);
  errno = ENOSYS;
  return -1;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) noexcept {
  void* target = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    target = va_arg(ap, void*);
    va_end(ap);
    pages_changing(target, new_len);
  }
  pages_changing(old, old_len);
  auto f = next_mremap.get();
  if (!f) {
    errno = ENOSYS;
    return MAP_FAILED;
  }
  return (flags & MREMAP_FIXED) ? f(old, old_len, new_len, flags, target)
                                : f(old, old_len, new_len, flags);
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int madvise(void* addr, size_t len, int advice) noexcept {
  if (replaces_pages(advice)) pages_changing(addr, len);
  if (auto f = next_madvise.get()) return f(addr, len, advice);
  errno = ENOSYS;
  return -1;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) noexcept {
  if (flags & MAP_FIXED) pages_changing(addr, len);
  if (auto f = next_mmap.get()) return f(addr, len, prot, flags, fd, off);
  errno = ENOSYS;
  return MAP_FAILED;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void* mmap64(void* addr, size_t len, int prot, int flags, int fd,
                           off64_t off) noexcept {
  if (flags & MAP_FIXED) pages_changing(addr, len);
  if (auto f = next_mmap64.get()) return f(addr, len, prot, flags, fd, off);
  errno = ENOSYS;
  return MAP_FAILED;
}

// The segment's size is not known here: everything from its address on counts as changed.
FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int shmdt(const void* addr) noexcept {
  if (mem_watch::active()) mem_watch::changing(reinterpret_cast<uintptr_t>(addr), UINTPTR_MAX);
  if (auto f = next_shmdt.get()) return f(addr);
  errno = ENOSYS;
  return -1;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE int brk(void* end) noexcept {
  auto sb = next_sbrk.get();
  if (sb) {
    const auto now = reinterpret_cast<uintptr_t>(sb(0));
    const auto to = reinterpret_cast<uintptr_t>(end);
    if (to < now && mem_watch::active()) mem_watch::changing(to, now);
  }
  if (auto f = next_brk.get()) return f(end);
  errno = ENOMEM;
  return -1;
}

FASTSOCK_HOOK FASTSOCK_EARLY_SAFE void* sbrk(intptr_t increment) noexcept {
  auto f = next_sbrk.get();
  if (!f) {
    errno = ENOMEM;
    return reinterpret_cast<void*>(-1);
  }
  if (increment < 0 && mem_watch::active()) {
    const auto now = reinterpret_cast<uintptr_t>(f(0));
    mem_watch::changing(now - uintptr_t(-increment), now);
  }
  return f(increment);
}
