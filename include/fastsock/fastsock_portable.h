/* fastsock typed arrays: the one implementation, over whatever send/receive calls it is given.
 *
 * Not included directly: fastsock.h includes it when FASTSOCK_DYNAMIC is defined (the shim
 * then uses libc's calls when the library is absent), and the library includes it with its
 * own send/receive paths (shm ring, TCP). Before including it, define FASTSOCK_PORTABLE_IO to
 * an expression of type `const struct fastsock_io*` (e.g. a call of a function declared
 * before and defined after the include).
 *
 * Wire format: exactly the bytes a plain write() of the selected elements produces, in the
 * sender's order; only a typed receive converts, when the peer's byte order differs.
 * Compiles as C11 and C++ (GCC/Clang builtins for byte swapping and atomics).
 */
#ifndef FASTSOCK_PORTABLE_H
#define FASTSOCK_PORTABLE_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifndef FASTSOCK_PORTABLE_IO
#error "define FASTSOCK_PORTABLE_IO before including fastsock_portable.h"
#endif

/* The calls the implementation moves bytes with, all in libc's -1-and-errno convention. */
struct fastsock_io {
  ssize_t (*sendmsg)(int fd, const struct msghdr* msg, int flags);
  ssize_t (*recvmsg)(int fd, struct msghdr* msg, int flags);
  int (*poll)(struct pollfd* fds, nfds_t n, int timeout);
  /* FASTSOCK_ORDER_LITTLE or _BIG: what the peer of `fd` sends. */
  int (*peer_order)(int fd);
};

/* The largest byte count a call can report (ssize_t's maximum; <limits.h> defines SSIZE_MAX
 * only for POSIX builds, and a strict -std=c11 program is not one). */
#define FASTSOCK__SSIZE_MAX ((size_t)-1 >> 1)

/* Runs of elements gathered into one sendmsg/recvmsg call. */
#define FASTSOCK__RUNS 64

/* A selection being moved: up to FASTSOCK__RUNS runs of contiguous elements. */
struct fastsock__batch {
  struct iovec iov[FASTSOCK__RUNS];
  int n;
};

static inline int fastsock__fail(int err) {
  errno = err;
  return -1;
}

/* Is `fd` an open descriptor? (Checked before anything is sent, so a closed fd sends
 * nothing and says EBADF whatever the call would have said.) */
static inline int fastsock__fd_ok(int fd) { return fd >= 0 && fcntl(fd, F_GETFD) != -1; }

/* a * b into *out, or 0 on overflow. */
static inline int fastsock__mul(size_t a, size_t b, size_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline int fastsock__add(size_t a, size_t b, size_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

/* The checks every call shares: element type, fd, and that `count` elements of it from
 * element `first` of `base` are addressable (no overflow, the right alignment, non-null).
 * Returns the element size, or 0 with errno set. */
static inline size_t fastsock__no_size(int err) {
  errno = err;
  return 0;
}
static inline size_t fastsock__check(int fd, const void* base, int type, size_t first,
                                     size_t count) {
  const size_t size = fastsock_type_size(type);
  size_t end, end_bytes;
  if (size == 0) return fastsock__no_size(EINVAL);
  if (count > 0 && base == NULL) return fastsock__no_size(EINVAL);
  if (!fastsock__add(first, count, &end) || !fastsock__mul(end, size, &end_bytes) ||
      end_bytes > FASTSOCK__SSIZE_MAX || (uintptr_t)base > UINTPTR_MAX - end_bytes)
    return fastsock__no_size(EOVERFLOW);
  /* Natural alignment: every element type's alignment is its size on the targets we build
   * for, and a misaligned portion usually means a byte offset was passed as an element
   * offset. */
  if ((uintptr_t)base % size != 0) return fastsock__no_size(EINVAL);
  if (!fastsock__fd_ok(fd)) return fastsock__no_size(EBADF);
  return size;
}

static inline void fastsock__swap(void* p, size_t size, size_t count) {
  size_t i;
  unsigned char* b = (unsigned char*)p;
  for (i = 0; i < count; ++i, b += size) {
    if (size == 2) {
      uint16_t v;
      memcpy(&v, b, 2);
      v = __builtin_bswap16(v);
      memcpy(b, &v, 2);
    } else if (size == 4) {
      uint32_t v;
      memcpy(&v, b, 4);
      v = __builtin_bswap32(v);
      memcpy(b, &v, 4);
    } else if (size == 8) {
      uint64_t v;
      memcpy(&v, b, 8);
      v = __builtin_bswap64(v);
      memcpy(b, &v, 8);
    }
  }
}

/* Does `fd`'s peer send in the other byte order (so received elements need swapping)? */
static inline int fastsock__foreign(int fd, size_t size) {
  return size > 1 && FASTSOCK_PORTABLE_IO->peer_order(fd) != fastsock_native_byte_order();
}

/* One sendmsg/recvmsg over `iov[0..n)`, retried on EINTR. Returns bytes moved, 0 for an
 * orderly end of stream on receive, or -1 with errno. */
static inline ssize_t fastsock__once(int fd, int sending, struct iovec* iov, int n, int flags) {
  for (;;) {
    struct msghdr msg;
    ssize_t rc;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)n;
    rc = sending ? FASTSOCK_PORTABLE_IO->sendmsg(fd, &msg, flags | MSG_NOSIGNAL)
                 : FASTSOCK_PORTABLE_IO->recvmsg(fd, &msg, flags);
    if (rc >= 0 || errno != EINTR) return rc;
  }
}

/* Drops `moved` bytes from the front of iov[*first..n). */
static inline void fastsock__advance(struct iovec* iov, int n, int* first, size_t moved) {
  while (*first < n && moved >= iov[*first].iov_len) moved -= iov[(*first)++].iov_len;
  if (*first < n && moved > 0) {
    iov[*first].iov_base = (char*)iov[*first].iov_base + moved;
    iov[*first].iov_len -= moved;
  }
}

/* Moves all of iov[0..n) (blocking semantics: waits in poll() if the fd is non-blocking).
 * The iovecs are consumed. 0, or -1 with errno (ECONNRESET if the stream ended first). */
static inline int fastsock__all(int fd, int sending, struct iovec* iov, int n) {
  int first = 0;
  while (first < n) {
    const ssize_t rc = fastsock__once(fd, sending, iov + first, n - first, 0);
    if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p;
      p.fd = fd;
      p.events = (short)(sending ? POLLOUT : POLLIN);
      p.revents = 0;
      if (FASTSOCK_PORTABLE_IO->poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
      continue;
    }
    if (rc < 0) return -1;
    if (rc == 0 && !sending) return fastsock__fail(ECONNRESET);
    fastsock__advance(iov, n, &first, (size_t)rc);
  }
  return 0;
}

/* Moves a batch and, on receive from a foreign-order peer, swaps what it received. The
 * batch's runs never overlap when swapping (see fastsock__add_run), so each element is
 * swapped exactly once after its bytes arrived. */
static inline int fastsock__flush(int fd, int sending, struct fastsock__batch* b, size_t size,
                                  int swap) {
  struct iovec saved[FASTSOCK__RUNS];
  int i;
  if (b->n == 0) return 0;
  memcpy(saved, b->iov, sizeof(struct iovec) * (size_t)b->n);
  if (fastsock__all(fd, sending, b->iov, b->n) < 0) return -1;
  if (swap)
    for (i = 0; i < b->n; ++i) fastsock__swap(saved[i].iov_base, size, saved[i].iov_len / size);
  b->n = 0;
  return 0;
}

/* Appends a run of `len` bytes at `p`, merging it with the previous run when adjacent.
 * When swapping, a run overlapping one already in the batch flushes the batch first (a
 * receive into the same element twice must swap each arrival once). */
static inline int fastsock__add_run(int fd, int sending, struct fastsock__batch* b, char* p,
                                    size_t len, size_t size, int swap) {
  int i;
  if (len == 0) return 0;
  if (swap)
    for (i = 0; i < b->n; ++i) {
      char* q = (char*)b->iov[i].iov_base;
      if (p < q + b->iov[i].iov_len && q < p + len) {
        if (fastsock__flush(fd, sending, b, size, swap) < 0) return -1;
        break;
      }
    }
  if (b->n > 0 && (char*)b->iov[b->n - 1].iov_base + b->iov[b->n - 1].iov_len == p) {
    b->iov[b->n - 1].iov_len += len;
    return 0;
  }
  if (b->n == FASTSOCK__RUNS && fastsock__flush(fd, sending, b, size, swap) < 0) return -1;
  b->iov[b->n].iov_base = p;
  b->iov[b->n].iov_len = len;
  b->n++;
  return 0;
}

/* ---- contiguous portions ---------------------------------------------------------- */

static inline int fastsock__array(int fd, void* base, int type, size_t offset, size_t count,
                                  int sending) {
  const size_t size = fastsock__check(fd, base, type, offset, count);
  struct fastsock__batch b;
  if (size == 0) return -1;
  if (count == 0) return 0;
  b.n = 0;
  /* One run: a single large call lets the link move the whole array at once (the shm
   * link's handoff copies straight from it; TCP takes it in one sendmsg). */
  if (fastsock__add_run(fd, sending, &b, (char*)base + offset * size, count * size, size,
                        !sending && fastsock__foreign(fd, size)) < 0)
    return -1;
  return fastsock__flush(fd, sending, &b, size, !sending && fastsock__foreign(fd, size));
}

static inline int fastsock_portable_send_array(int fd, const void* base, int type,
                                               size_t offset, size_t count) {
  return fastsock__array(fd, (void*)base, type, offset, count, 1);
}
static inline int fastsock_portable_recv_array(int fd, void* base, int type, size_t offset,
                                               size_t count) {
  return fastsock__array(fd, base, type, offset, count, 0);
}

/* One non-blocking step: moves what the socket takes now, adds it to *done (bytes of the
 * portion moved so far). 0 when the portion is complete, -1 with EAGAIN when more remains. */
static inline int fastsock__array_nb(int fd, void* base, int type, size_t offset, size_t count,
                                     size_t* done, int sending) {
  const size_t size = fastsock__check(fd, base, type, offset, count);
  size_t total;
  if (size == 0) return -1;
  if (done == NULL) return fastsock__fail(EINVAL);
  total = count * size;
  if (*done > total) return fastsock__fail(EINVAL);
  while (*done < total) {
    struct iovec v;
    ssize_t rc;
    v.iov_base = (char*)base + offset * size + *done;
    v.iov_len = total - *done;
    rc = fastsock__once(fd, sending, &v, 1, MSG_DONTWAIT);
    if (rc < 0) return -1;
    if (rc == 0 && !sending) return fastsock__fail(ECONNRESET);
    /* Elements completed by this step: [old done / size, new done / size). */
    if (!sending && fastsock__foreign(fd, size)) {
      const size_t from = *done / size, to = (*done + (size_t)rc) / size;
      fastsock__swap((char*)base + (offset + from) * size, size, to - from);
    }
    *done += (size_t)rc;
  }
  return 0;
}

static inline int fastsock_portable_send_array_nb(int fd, const void* base, int type,
                                                  size_t offset, size_t count, size_t* done) {
  return fastsock__array_nb(fd, (void*)base, type, offset, count, done, 1);
}
static inline int fastsock_portable_recv_array_nb(int fd, void* base, int type, size_t offset,
                                                  size_t count, size_t* done) {
  return fastsock__array_nb(fd, base, type, offset, count, done, 0);
}

/* ---- strided and indexed gather/scatter --------------------------------------------- */

static inline int fastsock__strided(int fd, void* base, int type, size_t offset,
                                    size_t blocks, size_t stride, size_t blocklen,
                                    int sending) {
  size_t last_start, extent, total, size, i;
  struct fastsock__batch b;
  int swap;
  /* The region's extent: element offset + (blocks-1)*stride + blocklen. */
  if (blocks == 0 || blocklen == 0) {
    extent = 0;
  } else if (!fastsock__mul(blocks - 1, stride, &last_start) ||
             !fastsock__add(last_start, blocklen, &extent)) {
    if (fastsock_type_size(type) == 0) return fastsock__fail(EINVAL);
    return fastsock__fail(EOVERFLOW);
  }
  size = fastsock__check(fd, base, type, offset, extent);
  if (size == 0) return -1;
  if (!fastsock__mul(blocks, blocklen, &total) || !fastsock__mul(total, size, &total) ||
      total > FASTSOCK__SSIZE_MAX)
    return fastsock__fail(EOVERFLOW);
  if (total == 0) return 0;
  swap = !sending && fastsock__foreign(fd, size);
  b.n = 0;
  for (i = 0; i < blocks; ++i)
    if (fastsock__add_run(fd, sending, &b, (char*)base + (offset + i * stride) * size,
                          blocklen * size, size, swap) < 0)
      return -1;
  return fastsock__flush(fd, sending, &b, size, swap);
}

static inline int fastsock_portable_send_strided(int fd, const void* base, int type,
                                                 size_t offset, size_t blocks, size_t stride,
                                                 size_t blocklen) {
  return fastsock__strided(fd, (void*)base, type, offset, blocks, stride, blocklen, 1);
}
static inline int fastsock_portable_recv_strided(int fd, void* base, int type, size_t offset,
                                                 size_t blocks, size_t stride,
                                                 size_t blocklen) {
  return fastsock__strided(fd, base, type, offset, blocks, stride, blocklen, 0);
}

static inline int fastsock__indexed(int fd, void* base, int type, const size_t* indices,
                                    size_t count, int sending) {
  size_t size = fastsock_type_size(type), i, max = 0, bytes;
  struct fastsock__batch b;
  int swap;
  if (size == 0) return fastsock__fail(EINVAL);
  if (count > 0 && indices == NULL) return fastsock__fail(EINVAL);
  for (i = 0; i < count; ++i)
    if (indices[i] > max) max = indices[i];
  /* Every index within [0, max]: checking element 0..max+1 covers them all. */
  if (count > 0 && max == SIZE_MAX) return fastsock__fail(EOVERFLOW);
  if (fastsock__check(fd, base, type, 0, count > 0 ? max + 1 : 0) == 0) return -1;
  if (!fastsock__mul(count, size, &bytes) || bytes > FASTSOCK__SSIZE_MAX)
    return fastsock__fail(EOVERFLOW);
  if (count == 0) return 0;
  swap = !sending && fastsock__foreign(fd, size);
  b.n = 0;
  for (i = 0; i < count; ++i)
    if (fastsock__add_run(fd, sending, &b, (char*)base + indices[i] * size, size, size,
                          swap) < 0)
      return -1;
  return fastsock__flush(fd, sending, &b, size, swap);
}

static inline int fastsock_portable_send_indexed(int fd, const void* base, int type,
                                                 const size_t* indices, size_t count) {
  return fastsock__indexed(fd, (void*)base, type, indices, count, 1);
}
static inline int fastsock_portable_recv_indexed(int fd, void* base, int type,
                                                 const size_t* indices, size_t count) {
  return fastsock__indexed(fd, base, type, indices, count, 0);
}

#endif /* FASTSOCK_PORTABLE_H */
