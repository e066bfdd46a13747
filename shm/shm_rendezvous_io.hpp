// One SOCK_SEQPACKET message with descriptors, sent or received without waiting, through
// the real libc entry points. Internal to the rendezvous.
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "shm_rendezvous_wire.hpp"

namespace fastsock::shm {

// Sends `len` bytes and `count` descriptors as one message (MSG_DONTWAIT, MSG_NOSIGNAL: a
// closed peer is -EPIPE, never SIGPIPE), with `creds` as explicit SCM_CREDENTIALS when
// given (else the kernel attaches the sender's pid, real uid and real gid to a receiver that
// asked with SO_PASSCRED). 0 or -errno (-EPERM: credentials the sender does not hold).
int send_message(int fd, const void* buf, size_t len, const int* fds, int count,
                 const struct ucred* creds = nullptr) noexcept;

struct Received {
  ssize_t len = 0;         // bytes of the message; 0 at end of stream (or an empty
                           // message, whose descriptors are closed); -errno (-EAGAIN: none)
  bool truncated = false;  // the message was longer than the buffer
  bool ctrunc = false;     // control data did not fit (the kernel dropped descriptors)
  ControlData control;         // descriptors received are the caller's to close
};
// Receives one message without waiting (MSG_CMSG_CLOEXEC). ECONNRESET counts as the end.
void recv_message(int fd, void* buf, size_t cap, Received& out) noexcept;
// Up to two messages in one system call (recvmmsg), each of `cap` bytes: the first as
// recv_message receives it (-EAGAIN, the end, an error included), the second only if it
// was queued already. Returns how many of out[] were filled (1 or 2). One call where a
// hello and its `where`, or a hello and nothing yet, would take two.
int recv_two_messages(int fd, void* const bufs[2], size_t cap, Received out[2]) noexcept;

void close_fds(const int* fds, int count) noexcept;

}  // namespace fastsock::shm
