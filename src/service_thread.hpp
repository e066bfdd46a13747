// The library's own threads (the RDMA connection manager's, a vendor library's service).
#pragma once

namespace fastsock {

// Starts `body(arg)` on a detached thread with every signal blocked (signals are the
// application's business) and returns once that thread runs: 0, or an errno value.
//
// Why it waits: a thread that is still being born when another thread forks can leave the
// runtime's bookkeeping of threads locked in the child. AddressSanitizer's thread registry
// is one (GCC 12's runtime does not hold it across fork): the library starts its service
// in fork's prepare handler when a listener must be watched, and a pre-forking server's
// worker forked at that moment hung in its own first pthread_create, or had a service
// thread that never ran, so the connect requests redirected to it went unanswered
// (rdma_prefork, `daemon` round, in the sanitizer build).
int start_service_thread(void (*body)(void*), void* arg) noexcept;

}  // namespace fastsock
