#include "real.hpp"

#include "adopt.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <type_traits>

namespace fastsock::detail {

RealLibc g_real{};
std::atomic<bool> g_real_ready{false};

namespace {

// A symbol this libc lacks (e.g. epoll_pwait2 on an old glibc) resolves to a function that
// fails with ENOSYS, so no caller ever jumps through a null pointer.
template <typename Ret, typename... Args>
struct Missing {
  static Ret call(Args...) {
    errno = ENOSYS;
    if constexpr (!std::is_void_v<Ret>) return Ret(-1);
  }
};
template <typename Ret, typename... Args>
Ret (*missing_for(Ret (*)(Args...)))(Args...) { return &Missing<Ret, Args...>::call; }
template <typename Ret, typename... Args>
struct MissingVariadic {
  static Ret call(Args..., ...) {
    errno = ENOSYS;
    return Ret(-1);
  }
};
template <typename Ret, typename... Args>
Ret (*missing_for(Ret (*)(Args..., ...)))(Args..., ...) {
  return &MissingVariadic<Ret, Args...>::call;
}

template <typename Fn>
void resolve_one(Fn& slot, const char* name) {
  void* sym = dlsym(RTLD_NEXT, name);
  slot = sym ? reinterpret_cast<Fn>(sym) : missing_for(slot);
}

std::once_flag g_once;

}  // namespace

void resolve_real() noexcept {
  bool first = false;
  std::call_once(g_once, [&] {
#define FASTSOCK_RESOLVE_REAL(name, ret, args) resolve_one(g_real.name, #name);
    FASTSOCK_REAL_FUNCTIONS(FASTSOCK_RESOLVE_REAL)
#undef FASTSOCK_RESOLVE_REAL
    g_real_ready.store(true, std::memory_order_release);
    first = true;
  });
  // The first hooked call of the process is also the moment to take over the sockets it
  // inherited (adoption itself calls real(), hence outside the once-block).
  if (first) adopt_inherited_sockets();
}

}  // namespace fastsock::detail
