// Whether a blocking call that a signal handler interrupted should restart (SA_RESTART) or
// fail with EINTR, for calls the library turns into a wait of its own.
//
// The kernel restarts recv/send/accept when the handler that ran was installed with
// SA_RESTART. The library waits in poll(), which always fails with EINTR once a handler
// ran, and poll does not say which one. So the answer is read from the handlers
// installed: restart when every signal that could have been delivered to this thread (not
// blocked in it, and not a fault signal) and has a handler has SA_RESTART; fail with EINTR when any lacks it (the
// application installed it precisely to interrupt blocking calls). Only asked after an
// EINTR, so its cost (one sigaction per signal) is off every fast path.
#pragma once

namespace fastsock {

bool interrupted_call_restarts() noexcept;

}  // namespace fastsock
