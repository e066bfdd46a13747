#include "signal_restart.hpp"

#include <pthread.h>
#include <signal.h>

namespace fastsock {

bool interrupted_call_restarts() noexcept {
  sigset_t blocked;
  if (pthread_sigmask(SIG_BLOCK, nullptr, &blocked) != 0) sigemptyset(&blocked);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&blocked, sig) == 1) continue;
    // Fault signals are raised by the faulting instruction itself and cannot interrupt a
    // sleeping poll; their handlers (crash reporters, sanitizers) often lack SA_RESTART.
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP ||
        sig == SIGSYS)
      continue;
    struct sigaction action;
    if (sigaction(sig, nullptr, &action) != 0) continue;  // not a valid signal number
    const bool has_handler = (action.sa_flags & SA_SIGINFO)
                                 ? action.sa_sigaction != nullptr
                                 : action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN;
    if (has_handler && !(action.sa_flags & SA_RESTART)) return false;
  }
  return true;
}

}  // namespace fastsock
