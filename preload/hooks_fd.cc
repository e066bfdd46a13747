// Exported hooks: descriptors. fcntl and ioctl are variadic; their optional third argument
// is passed on as a pointer-sized value, which carries an int or a pointer alike on the
// ABIs glibc supports.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>

#include "hook.hpp"

using namespace fastsock;

FASTSOCK_HOOK int close(int fd) { FASTSOCK_RETURN(int, ops::close(fd)); }
FASTSOCK_HOOK int close_range(unsigned first, unsigned last, int flags) noexcept {
  FASTSOCK_RETURN(int, ops::close_range(first, last, flags));
}
FASTSOCK_HOOK void closefrom(int lowfd) noexcept {
  const int saved = errno;
  ops::closefrom(lowfd);
  errno = saved;
}
FASTSOCK_HOOK int fclose(FILE* stream) { FASTSOCK_RETURN(int, ops::fclose(stream)); }
FASTSOCK_HOOK FILE* fdopen(int fd, const char* mode) noexcept { return ops::fdopen(fd, mode); }
FASTSOCK_HOOK int dup(int fd) noexcept { FASTSOCK_RETURN(int, ops::dup(fd)); }
FASTSOCK_HOOK int dup2(int fd, int newfd) noexcept { FASTSOCK_RETURN(int, ops::dup2(fd, newfd)); }
FASTSOCK_HOOK int dup3(int fd, int newfd, int flags) noexcept {
  FASTSOCK_RETURN(int, ops::dup3(fd, newfd, flags));
}

namespace {
void* third_arg(va_list ap) { return va_arg(ap, void*); }
}  // namespace

FASTSOCK_HOOK int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = third_arg(ap);
  va_end(ap);
  FASTSOCK_RETURN(int, ops::fcntl(fd, cmd, arg, false));
}
FASTSOCK_HOOK int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = third_arg(ap);
  va_end(ap);
  FASTSOCK_RETURN(int, ops::fcntl(fd, cmd, arg, true));
}
FASTSOCK_HOOK int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  void* arg = third_arg(ap);
  va_end(ap);
  FASTSOCK_RETURN(int, ops::ioctl(fd, request, arg));
}
