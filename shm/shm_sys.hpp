// Raw system calls for the descriptors the shm library touches.
//
// This code runs inside the preload library, which hooks close, fcntl, read and write;
// calling those names would re-enter the library's own bookkeeping. The segment's memfd and
// the notification eventfds are never application descriptors, so they bypass the hooks.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace fastsock::shm::sys {

inline int close(int fd) { return static_cast<int>(::syscall(SYS_close, fd)); }
inline int fcntl(int fd, int cmd, long arg) {
  return static_cast<int>(::syscall(SYS_fcntl, fd, cmd, arg));
}
inline long read(int fd, void* buf, size_t n) { return ::syscall(SYS_read, fd, buf, n); }
inline long write(int fd, const void* buf, size_t n) { return ::syscall(SYS_write, fd, buf, n); }

}  // namespace fastsock::shm::sys
