#include "guarded_copy.hpp"

#include <setjmp.h>
#include <signal.h>

#include <cstring>

namespace fastsock::tool {
namespace {

sigjmp_buf g_bus_jump;

void on_sigbus(int) { siglongjmp(g_bus_jump, 1); }

}  // namespace

bool copy_guarded(void* dst, const void* src, size_t n) {
  struct sigaction guard {};
  struct sigaction previous {};
  guard.sa_handler = on_sigbus;
  sigemptyset(&guard.sa_mask);
  ::sigaction(SIGBUS, &guard, &previous);
  // `copied` is written after sigsetjmp and read after a possible siglongjmp: volatile.
  volatile bool copied = false;
  if (sigsetjmp(g_bus_jump, 1) == 0) {
    std::memcpy(dst, src, n);
    copied = true;
  }
  ::sigaction(SIGBUS, &previous, nullptr);
  return copied;
}

}  // namespace fastsock::tool
