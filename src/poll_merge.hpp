// poll() over a set that mixes kernel descriptors with connections whose link carries data
// outside the kernel (shm, verbs). The kernel cannot see a link's readiness, so the links
// report it themselves (Transport::poll_now) and lend the kernel descriptors that wake a
// sleeper when it changes (Transport::wait_fds). select and pselect come here through
// their poll equivalent when such a connection is in their sets.
#pragma once

#include <poll.h>
#include <signal.h>
#include <time.h>

namespace fastsock::ops {

// True when one of the entries is a connection on a user-space link; only then does
// poll_merged need to run (every other set goes to the kernel unchanged).
bool has_user_link(const pollfd* fds, nfds_t n);

// ppoll semantics: `timeout` null = wait forever; `mask` as ppoll's. Returns the number of
// entries with events, or -errno.
long poll_merged(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask);

}  // namespace fastsock::ops
