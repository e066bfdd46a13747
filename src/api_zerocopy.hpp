// MSG_ZEROCOPY for the typed calls' large blocking sends on kernel TCP (docs/api.md).
//
// Opt-in (FASTSOCK_ZEROCOPY=1): the typed API promises that the array may be reused when a
// call returns, so a zerocopy send must wait until the kernel's completion notification
// covers it, and the kernel frees the pages only when the peer acknowledged the data. A
// send therefore waits for the peer's receive window, where a plain send returns once its
// bytes are copied into the send buffer: two programs that both send large arrays before
// receiving could wait on each other. Off by default so that no program that works with
// plain sends can hang with the library.
#pragma once

#include <sys/socket.h>

namespace fastsock::api::zerocopy {

// Sends `msg` on `fd` (blocking semantics: `flags` without MSG_DONTWAIT) with MSG_ZEROCOPY
// when enabled and worthwhile, returning only once the kernel no longer references the
// buffers; otherwise, or when the kernel cannot, a plain send through the library's
// sendmsg. Bytes sent, or -errno.
long sendmsg(int fd, const msghdr* msg, int flags);

}  // namespace fastsock::api::zerocopy
