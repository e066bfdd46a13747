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
  /* Optional (NULL: none): the element type travelling out of band, where the link can
   * carry it. Called with `begin` 1 before a typed call moves `bytes` (a send's whole
   * selection, once; a receive's rest, at every step) and with `begin` 0 when the step
   * ends. A receive's step fails with EBADMSG, before it takes a byte, where the sender
   * marked those bytes with another type. Returns 0, or -1 with errno. */
  int (*typed)(int fd, int begin, int sending, int type, size_t bytes);
};

/* The largest byte count a call can report (ssize_t's maximum; <limits.h> defines SSIZE_MAX
 * only for POSIX builds, and a strict -std=c11 program is not one). */
#define FASTSOCK__SSIZE_MAX ((size_t)-1 >> 1)

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

/* ---- selections ---------------------------------------------------------------------
 *
 * Every call moves a selection: `runs` runs of `run_len` bytes each, in the order they
 * travel, run r starting at fastsock__run(sel, r). A contiguous portion is one run, a
 * strided selection one run per block, an indexed one one run per element, a multi-strided
 * one one run per innermost block. The wire carries the runs back to back, so a position in
 * the stream (`done` bytes) names a run and a byte within it: that is what lets every call
 * be resumed mid-element with the same arguments. */
struct fastsock__sel {
  char* base;    /* element 0 of the array */
  size_t size;   /* element size */
  int type;      /* FASTSOCK_* element type */
  size_t runs;
  size_t run_len;
  size_t offset; /* element of run 0 (all but indexed) */
  size_t stride; /* strided: elements between runs */
  const size_t* indices;                /* indexed: run r is element indices[r] */
  const struct fastsock_level* levels;  /* multi-strided: outer to inner */
  size_t nlevels;
};

/* Runs gathered into one sendmsg/recvmsg call, and the bytes after which gathering stops:
 * a call re-gathers from its position after every partial transfer, so the work per call
 * stays proportional to what the socket can take, not to the rest of the selection. */
#define FASTSOCK__RUNS 64
#define FASTSOCK__BATCH_BYTES ((size_t)1 << 20)

/* Where run `r` starts. */
static inline char* fastsock__run(const struct fastsock__sel* s, size_t r) {
  size_t at = s->offset, j;
  if (s->indices != NULL) {
    at = s->indices[r];
  } else if (s->levels != NULL) {
    /* r in mixed radix, the innermost level's digit the fastest. */
    for (j = s->nlevels; j-- > 0;) {
      at += (r % s->levels[j].count) * s->levels[j].stride;
      r /= s->levels[j].count;
    }
  } else {
    at += r * s->stride;
  }
  return s->base + at * s->size;
}

/* Does [p, p + len) overlap a gathered iovec? The first one is taken from the start of its
 * element (`lead` bytes before it), whose earlier bytes arrived in an earlier call. */
static inline int fastsock__overlaps(const struct iovec* iov, int n, size_t lead, const char* p,
                                     size_t len) {
  int i;
  for (i = 0; i < n; ++i) {
    const char* q = (const char*)iov[i].iov_base - (i == 0 ? lead : 0);
    if (p < (const char*)iov[i].iov_base + iov[i].iov_len && q < p + len) return 1;
  }
  return 0;
}

/* The iovecs for the selection from stream position `pos` on (adjacent runs merged). When
 * swapping received elements, gathering stops before a run overlapping one already gathered:
 * an element must not be written twice by one call, or its first arrival would be swapped
 * with the second's bytes in it. Returns the number of iovecs (at least 1). */
static inline int fastsock__gather(const struct fastsock__sel* s, size_t pos, int swap,
                                   struct iovec* iov) {
  size_t r = pos / s->run_len, skip = pos % s->run_len, bytes = 0;
  const size_t lead = skip % s->size;
  int n = 0;
  for (; r < s->runs && bytes < FASTSOCK__BATCH_BYTES; ++r, skip = 0) {
    char* p = fastsock__run(s, r) + skip;
    const size_t len = s->run_len - skip;
    if (swap && fastsock__overlaps(iov, n, lead, p, len)) break;
    if (n > 0 && (char*)iov[n - 1].iov_base + iov[n - 1].iov_len == p) {
      iov[n - 1].iov_len += len;
    } else {
      if (n == FASTSOCK__RUNS) break;
      iov[n].iov_base = p;
      iov[n].iov_len = len;
      ++n;
    }
    bytes += len;
  }
  return n;
}

/* Swaps the elements that stream bytes [from, to) completed: those whose last byte is in it. */
static inline void fastsock__swap_completed(const struct fastsock__sel* s, size_t from,
                                            size_t to) {
  const size_t per_run = s->run_len / s->size;
  size_t e;
  for (e = from / s->size; e < to / s->size; ++e)
    fastsock__swap(fastsock__run(s, e / per_run) + (e % per_run) * s->size, s->size, 1);
}

/* Moves the selection from stream position *done to its end, adding what moved to *done.
 * Blocking: waits in poll() when the fd is non-blocking, returns 0 when complete. Otherwise
 * (MSG_DONTWAIT) returns -1 with EAGAIN as soon as the socket takes or has no more. On
 * receive from a foreign-order peer each element is swapped once, when its last byte
 * arrives. -1 with errno on an error, ECONNRESET if the stream ends first. */
static inline int fastsock__move(int fd, const struct fastsock__sel* s, size_t* done,
                                 int sending, int blocking) {
  const size_t total = s->runs * s->run_len;
  const int swap = !sending && fastsock__foreign(fd, s->size);
  while (*done < total) {
    struct iovec iov[FASTSOCK__RUNS];
    const int n = fastsock__gather(s, *done, swap, iov);
    const ssize_t rc = fastsock__once(fd, sending, iov, n, blocking ? 0 : MSG_DONTWAIT);
    if (rc < 0 && blocking && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p;
      p.fd = fd;
      p.events = (short)(sending ? POLLOUT : POLLIN);
      p.revents = 0;
      if (FASTSOCK_PORTABLE_IO->poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
      continue;
    }
    if (rc < 0) return -1;
    if (rc == 0 && !sending) return fastsock__fail(ECONNRESET);
    if (swap) fastsock__swap_completed(s, *done, *done + (size_t)rc);
    *done += (size_t)rc;
  }
  return 0;
}

/* Runs a validated selection: blocking from the start when `done` is NULL, else one
 * non-blocking step from *done (which must not exceed the selection's size). */
static inline int fastsock__run_sel(int fd, const struct fastsock__sel* s, size_t* done,
                                    int sending) {
  int (*typed)(int, int, int, int, size_t) = FASTSOCK_PORTABLE_IO->typed;
  const size_t total = s->runs * s->run_len;
  size_t from = 0;
  int rc, saved;
  if (done != NULL && *done > total) return fastsock__fail(EINVAL);
  if (done == NULL) done = &from;
  /* A send announces its whole selection once, at its first step; a receive expects its
   * type for the rest of the selection at every step. */
  if (typed != NULL && (!sending || *done == 0) && *done < total &&
      typed(fd, 1, sending, s->type, total - *done) != 0)
    return -1;
  rc = fastsock__move(fd, s, done, sending, done == &from);
  if (typed != NULL && !sending) {
    saved = errno;
    (void)typed(fd, 0, sending, s->type, 0);
    errno = saved;
  }
  return rc;
}

/* A selection with nothing set: fields the kind does not use stay zero/NULL. */
static inline struct fastsock__sel fastsock__empty_sel(void* base, size_t size, int type) {
  struct fastsock__sel s;
  memset(&s, 0, sizeof s);
  s.base = (char*)base;
  s.size = size;
  s.type = type;
  return s;
}

/* `nb`: the non-blocking variant was called, so `done` must not be NULL. */
static inline int fastsock__done_ok(int nb, const size_t* done) { return !nb || done != NULL; }

/* ---- contiguous portions ---------------------------------------------------------- */

/* done NULL: blocking; else a non-blocking step (same for every kind below). */
static inline int fastsock__array(int fd, void* base, int type, size_t offset, size_t count,
                                  int nb, size_t* done, int sending) {
  const size_t size = fastsock__check(fd, base, type, offset, count);
  struct fastsock__sel s = fastsock__empty_sel(base, size, type);
  if (size == 0) return -1;
  if (!fastsock__done_ok(nb, done)) return fastsock__fail(EINVAL);
  /* One run: a single large call lets the link move the whole array at once (the shm
   * link's handoff copies straight from it; TCP takes it in one sendmsg). */
  s.runs = count > 0;
  s.run_len = count * size;
  s.offset = offset;
  return fastsock__run_sel(fd, &s, done, sending);
}

static inline int fastsock_portable_send_array(int fd, const void* base, int type,
                                               size_t offset, size_t count) {
  return fastsock__array(fd, (void*)base, type, offset, count, 0, NULL, 1);
}
static inline int fastsock_portable_recv_array(int fd, void* base, int type, size_t offset,
                                               size_t count) {
  return fastsock__array(fd, base, type, offset, count, 0, NULL, 0);
}
static inline int fastsock_portable_send_array_nb(int fd, const void* base, int type,
                                                  size_t offset, size_t count, size_t* done) {
  return fastsock__array(fd, (void*)base, type, offset, count, 1, done, 1);
}
static inline int fastsock_portable_recv_array_nb(int fd, void* base, int type, size_t offset,
                                                  size_t count, size_t* done) {
  return fastsock__array(fd, base, type, offset, count, 1, done, 0);
}

/* ---- strided and indexed gather/scatter --------------------------------------------- */

/* The selection's size in bytes, runs * run_len, or 0 with EOVERFLOW past SSIZE_MAX. */
static inline int fastsock__total_ok(size_t runs, size_t run_len) {
  size_t total;
  return fastsock__mul(runs, run_len, &total) && total <= FASTSOCK__SSIZE_MAX;
}

static inline int fastsock__strided(int fd, void* base, int type, size_t offset, size_t blocks,
                                    size_t stride, size_t blocklen, int nb, size_t* done,
                                    int sending) {
  size_t last_start, extent, size, run_len;
  struct fastsock__sel s;
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
  if (!fastsock__mul(blocklen, size, &run_len) || !fastsock__total_ok(blocks, run_len))
    return fastsock__fail(EOVERFLOW);
  if (!fastsock__done_ok(nb, done)) return fastsock__fail(EINVAL);
  s = fastsock__empty_sel(base, size, type);
  s.runs = run_len > 0 ? blocks : 0;
  s.run_len = run_len;
  s.offset = offset;
  s.stride = stride;
  return fastsock__run_sel(fd, &s, done, sending);
}

static inline int fastsock_portable_send_strided(int fd, const void* base, int type,
                                                 size_t offset, size_t blocks, size_t stride,
                                                 size_t blocklen) {
  return fastsock__strided(fd, (void*)base, type, offset, blocks, stride, blocklen, 0, NULL, 1);
}
static inline int fastsock_portable_recv_strided(int fd, void* base, int type, size_t offset,
                                                 size_t blocks, size_t stride,
                                                 size_t blocklen) {
  return fastsock__strided(fd, base, type, offset, blocks, stride, blocklen, 0, NULL, 0);
}
static inline int fastsock_portable_send_strided_nb(int fd, const void* base, int type,
                                                    size_t offset, size_t blocks, size_t stride,
                                                    size_t blocklen, size_t* done) {
  return fastsock__strided(fd, (void*)base, type, offset, blocks, stride, blocklen, 1, done, 1);
}
static inline int fastsock_portable_recv_strided_nb(int fd, void* base, int type,
                                                    size_t offset, size_t blocks, size_t stride,
                                                    size_t blocklen, size_t* done) {
  return fastsock__strided(fd, base, type, offset, blocks, stride, blocklen, 1, done, 0);
}

static inline int fastsock__indexed(int fd, void* base, int type, const size_t* indices,
                                    size_t count, int nb, size_t* done, int sending) {
  size_t size = fastsock_type_size(type), i, max = 0;
  struct fastsock__sel s;
  if (size == 0) return fastsock__fail(EINVAL);
  if (count > 0 && indices == NULL) return fastsock__fail(EINVAL);
  for (i = 0; i < count; ++i)
    if (indices[i] > max) max = indices[i];
  /* Every index within [0, max]: checking element 0..max+1 covers them all. */
  if (count > 0 && max == SIZE_MAX) return fastsock__fail(EOVERFLOW);
  if (fastsock__check(fd, base, type, 0, count > 0 ? max + 1 : 0) == 0) return -1;
  if (!fastsock__total_ok(count, size)) return fastsock__fail(EOVERFLOW);
  if (!fastsock__done_ok(nb, done)) return fastsock__fail(EINVAL);
  s = fastsock__empty_sel(base, size, type);
  s.runs = count;
  s.run_len = size;
  s.indices = indices;
  return fastsock__run_sel(fd, &s, done, sending);
}

static inline int fastsock_portable_send_indexed(int fd, const void* base, int type,
                                                 const size_t* indices, size_t count) {
  return fastsock__indexed(fd, (void*)base, type, indices, count, 0, NULL, 1);
}
static inline int fastsock_portable_recv_indexed(int fd, void* base, int type,
                                                 const size_t* indices, size_t count) {
  return fastsock__indexed(fd, base, type, indices, count, 0, NULL, 0);
}
static inline int fastsock_portable_send_indexed_nb(int fd, const void* base, int type,
                                                    const size_t* indices, size_t count,
                                                    size_t* done) {
  return fastsock__indexed(fd, (void*)base, type, indices, count, 1, done, 1);
}
static inline int fastsock_portable_recv_indexed_nb(int fd, void* base, int type,
                                                    const size_t* indices, size_t count,
                                                    size_t* done) {
  return fastsock__indexed(fd, base, type, indices, count, 1, done, 0);
}

/* ---- multi-strided regions ----------------------------------------------------------- */

static inline int fastsock__multistrided(int fd, void* base, int type, size_t offset,
                                         const struct fastsock_level* levels, size_t nlevels,
                                         size_t blocklen, int nb, size_t* done, int sending) {
  size_t runs = 1, extent = 0, size = fastsock_type_size(type), run_len, span, j;
  struct fastsock__sel s;
  if (size == 0) return fastsock__fail(EINVAL);
  if (nlevels > 0 && levels == NULL) return fastsock__fail(EINVAL);
  /* runs = product of the counts; extent = sum of (count-1)*stride, + blocklen. An empty
   * level (count 0) or block makes the whole selection empty, whatever the strides. */
  for (j = 0; j < nlevels; ++j) {
    if (levels[j].count == 0) runs = 0;
    else if (!fastsock__mul(runs, levels[j].count, &runs)) return fastsock__fail(EOVERFLOW);
  }
  if (runs > 0 && blocklen > 0) {
    for (j = 0; j < nlevels; ++j)
      if (!fastsock__mul(levels[j].count - 1, levels[j].stride, &span) ||
          !fastsock__add(extent, span, &extent))
        return fastsock__fail(EOVERFLOW);
    if (!fastsock__add(extent, blocklen, &extent)) return fastsock__fail(EOVERFLOW);
  }
  if (fastsock__check(fd, base, type, offset, extent) == 0) return -1;
  if (!fastsock__mul(blocklen, size, &run_len) || !fastsock__total_ok(runs, run_len))
    return fastsock__fail(EOVERFLOW);
  if (!fastsock__done_ok(nb, done)) return fastsock__fail(EINVAL);
  s = fastsock__empty_sel(base, size, type);
  s.runs = run_len > 0 ? runs : 0;
  s.run_len = run_len;
  s.offset = offset;
  s.levels = levels;
  s.nlevels = nlevels;
  return fastsock__run_sel(fd, &s, done, sending);
}

static inline int fastsock_portable_send_multistrided(int fd, const void* base, int type,
                                                      size_t offset,
                                                      const struct fastsock_level* levels,
                                                      size_t nlevels, size_t blocklen) {
  return fastsock__multistrided(fd, (void*)base, type, offset, levels, nlevels, blocklen, 0,
                                NULL, 1);
}
static inline int fastsock_portable_recv_multistrided(int fd, void* base, int type,
                                                      size_t offset,
                                                      const struct fastsock_level* levels,
                                                      size_t nlevels, size_t blocklen) {
  return fastsock__multistrided(fd, base, type, offset, levels, nlevels, blocklen, 0, NULL, 0);
}
static inline int fastsock_portable_send_multistrided_nb(int fd, const void* base, int type,
                                                         size_t offset,
                                                         const struct fastsock_level* levels,
                                                         size_t nlevels, size_t blocklen,
                                                         size_t* done) {
  return fastsock__multistrided(fd, (void*)base, type, offset, levels, nlevels, blocklen, 1,
                                done, 1);
}
static inline int fastsock_portable_recv_multistrided_nb(int fd, void* base, int type,
                                                         size_t offset,
                                                         const struct fastsock_level* levels,
                                                         size_t nlevels, size_t blocklen,
                                                         size_t* done) {
  return fastsock__multistrided(fd, base, type, offset, levels, nlevels, blocklen, 1, done, 0);
}

#endif /* FASTSOCK_PORTABLE_H */
