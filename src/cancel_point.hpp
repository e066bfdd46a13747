// Marks a function that sleeps in a system call that is a cancellation point (poll, ppoll).
//
// pthread_cancel unwinds such a function without running its epilogue. Under
// AddressSanitizer that leaves the poison of its stack redzones behind, and ASan then
// misreports the frames that reuse that stack while the cancellation unwinds (it aborts in
// its own error reporting). Exceptions do not have the problem: __cxa_throw unpoisons the
// stack first. So these few functions carry no ASan stack instrumentation; everything else
// stays checked.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define FASTSOCK_CANCELLATION_POINT __attribute__((no_sanitize("address")))
#else
#define FASTSOCK_CANCELLATION_POINT
#endif
