// Descriptors: the fd table follows every way the application closes or copies one.
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <sys/ioctl.h>

#include <algorithm>

#include "epoll_merge.hpp"
#include "fd_table.hpp"
#include "guard.hpp"
#include "internal_fds.hpp"
#include "log.hpp"
#include "ops.hpp"
#include "real.hpp"
#include "result.hpp"
#include "transport.hpp"
#include "user_io.hpp"

namespace fastsock::ops {

namespace {

// Descriptors about to be closed (or replaced by dup2/dup3): the library's own state that
// refers to them by number goes first. close() never gets here with one of the library's
// own descriptors (internal_fds.hpp); dup2/dup3 onto one can: its owner is told.
// `internal` says whether `fd` is one of them (the caller has looked already).
void closing(int fd, bool internal) {
  log_fd_closing(fd);
  epoll_merge::forget_sets(unsigned(fd), unsigned(fd));
  if (internal) internal_fds::replaced(fd);
}

// close_range/closefrom spare the library's descriptors (internal_fds::close_range_sparing).
void closing_range(unsigned first, unsigned last) {
  log_fd_range_closing(first, last);
  epoll_merge::forget_sets(first, last);
}

}  // namespace

long close(int fd) {
  // A library the link uses (librdmacm, libibverbs, a vendor library) closing descriptors
  // of its own, called by the library's code: nothing of ours refers to them, and
  // forgetting epoll sets would take a lock the caller may be waiting behind (a service
  // thread closing a connection under its lock while the application's epoll_wait,
  // holding the epoll lock, asks that service to watch a descriptor: a deadlock).
  if (inside_library()) return neg_errno(real().close(fd));
  // Never handed to the application: to it the number is not open (internal_fds.hpp).
  if (internal_fds::contains(fd)) return -EBADF;
  closing(fd, false);
  // Forget first: once the kernel closes the number it may be reused at once by another
  // thread's socket(), and that new entry must not be the one we remove.
  fd_table::remove(fd);
  return neg_errno(real().close(fd));
}

long close_range(unsigned first, unsigned last, int flags) {
  if (first > last) return -EINVAL;
  if (const long rc = internal_fds::close_range_sparing(first, last, flags); rc != 0) return rc;
  if (!(flags & CLOSE_RANGE_CLOEXEC)) {
    closing_range(first, last);
    fd_table::remove_range(first, last);
  }
  return 0;
}

void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  closing_range(unsigned(lowfd), ~0u);
  // Without close_range (kernels before 5.9) glibc's own fallback walks /proc/self/fd and
  // cannot spare the library's descriptors.
  if (internal_fds::close_range_sparing(unsigned(lowfd), ~0u, 0) != 0) real().closefrom(lowfd);
  fd_table::remove_range(unsigned(lowfd), ~0u);
}

long fclose(FILE* stream) {
  const int fd = stream ? fileno(stream) : -1;
  if (fd >= 0) {
    closing(fd, internal_fds::contains(fd));
    fd_table::remove(fd);
  }
  // fclose returns EOF (not -1 by contract) on failure; EOF is -1 in glibc.
  return neg_errno(real().fclose(stream));
}

FILE* fdopen(int fd, const char* mode) noexcept {
  downgrade_fd(fd, "fdopen (stdio uses the kernel socket)");
  return real().fdopen(fd, mode);
}

long dup(int fd) {
  const int nfd = real().dup(fd);
  if (nfd < 0) return -errno;
  fd_table::install_owned(nfd, fd_table::lookup(fd));
  return nfd;
}

long dup2(int fd, int newfd) {
  if (fd != newfd) closing(newfd, internal_fds::contains(newfd));
  const int rc = real().dup2(fd, newfd);
  if (rc < 0) return -errno;
  if (fd != newfd) fd_table::install_owned(newfd, fd_table::lookup(fd));
  return rc;
}

long dup3(int fd, int newfd, int flags) {
  if (fd != newfd) closing(newfd, internal_fds::contains(newfd));
  const int rc = real().dup3(fd, newfd, flags);
  if (rc < 0) return -errno;
  fd_table::install_owned(newfd, fd_table::lookup(fd));
  return rc;
}

long fcntl(int fd, int cmd, void* arg, bool fcntl64) {
  const int rc = fcntl64 ? real().fcntl64(fd, cmd, arg) : real().fcntl(fd, cmd, arg);
  if (rc < 0) return -errno;
  if (cmd == F_SETFL || cmd == F_SETFD) fd_table::mode_changed(fd);
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) fd_table::install_owned(rc, fd_table::lookup(fd));
  return rc;
}

long ioctl(int fd, unsigned long request, void* arg) {
  // FIONREAD (= SIOCINQ) counts the bytes waiting on the link that carries them; everything
  // else, FIONBIO included, belongs to the kernel socket.
  if (request == FIONREAD && fd_table::maybe_tracked(fd)) {
    SocketRef s = fd_table::lookup(fd);
    if (s && user_link(*s)) {
      if (!arg) return -EFAULT;
      const long n = user_bytes_readable(*s, fd);
      if (n < 0) return n;
      *static_cast<int*>(arg) = int(std::min<long>(n, INT_MAX));
      return 0;
    }
  }
  const int rc = real().ioctl(fd, request, arg);
  if (rc < 0) return -errno;
  if (request == FIONBIO || request == FIOCLEX || request == FIONCLEX)
    fd_table::mode_changed(fd);
  return rc;
}

}  // namespace fastsock::ops
