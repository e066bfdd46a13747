/* fastsock public C API. Self-contained; compiles as C and C++.
 *
 * Three ways to use it:
 *  - linked with -lfastsock (pkg-config fastsock): the functions below are the library's;
 *  - with FASTSOCK_DYNAMIC defined before including this header, nothing to link: each call
 *    finds the library's entry point at run time (dlsym(RTLD_DEFAULT, ...)) when the program
 *    runs under the preload library, and otherwise falls back to plain sendmsg/recvmsg
 *    loops with the same semantics (the "use the fast methods when available" pattern);
 *  - only fastsock_version/fastsock_transport by hand with dlsym, as before.
 *
 * Typed arrays (docs/api.md): the bytes on the wire are exactly what a plain write() of the
 * selected elements produces, in the sender's native byte order, so typed and untyped ends
 * mix freely and peers without fastsock work. Every call is "all or error": 0 when the whole
 * selection was sent or received, else -1 with errno; a bad argument (EINVAL, EOVERFLOW,
 * EBADF) is reported before a single byte moves. A blocking call on a non-blocking fd waits
 * in poll(); EINTR is retried. A stream that ends before the selection is complete gives
 * ECONNRESET; other errors after part of it moved leave the stream mid-selection (use the
 * _nb variants to know how far it got). Where the link carries the element type out of band
 * (shm), a typed receive of bytes that were sent typed with another element type fails with
 * EBADMSG before taking a byte (1-byte types agree with all; docs/api.md).
 */
#ifndef FASTSOCK_FASTSOCK_H
#define FASTSOCK_FASTSOCK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FASTSOCK_BUILDING_LIBRARY)
#define FASTSOCK_API __attribute__((visibility("default")))
#else
#define FASTSOCK_API
#endif

/* Element types. FASTSOCK_BYTE is raw bytes (never converted). */
enum fastsock_type {
  FASTSOCK_BYTE = 1,
  FASTSOCK_INT8,
  FASTSOCK_UINT8,
  FASTSOCK_INT16,
  FASTSOCK_UINT16,
  FASTSOCK_INT32,
  FASTSOCK_UINT32,
  FASTSOCK_INT64,
  FASTSOCK_UINT64,
  FASTSOCK_FLOAT,
  FASTSOCK_DOUBLE
};

/* One level of a multi-strided region: `count` repetitions, `stride` elements apart. */
struct fastsock_level {
  size_t count;
  size_t stride;
};

/* Byte orders. */
enum fastsock_byte_order { FASTSOCK_ORDER_LITTLE = 1, FASTSOCK_ORDER_BIG = 2 };

/* Size in bytes of one element of `type`, 0 for an unknown type. */
static inline size_t fastsock_type_size(int type) {
  switch (type) {
    case FASTSOCK_BYTE: case FASTSOCK_INT8: case FASTSOCK_UINT8: return 1;
    case FASTSOCK_INT16: case FASTSOCK_UINT16: return 2;
    case FASTSOCK_INT32: case FASTSOCK_UINT32: case FASTSOCK_FLOAT: return 4;
    case FASTSOCK_INT64: case FASTSOCK_UINT64: case FASTSOCK_DOUBLE: return 8;
    default: return 0;
  }
}

static inline int fastsock_native_byte_order(void) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return FASTSOCK_ORDER_BIG;
#else
  return FASTSOCK_ORDER_LITTLE;
#endif
}

/* The declarations, as (return type, name, parameters, argument names): expanded below
 * into prototypes of the library's functions, or into the FASTSOCK_DYNAMIC shim. */
#define FASTSOCK_API_LIST(X)                                                                \
  /* The library's version, e.g. "0.1.0". (Shim without the library: NULL.) */              \
  X(const char*, fastsock_version, (void), ())                                              \
  /* The name of the transport carrying the TCP connection on `fd` ("tcp", "shm", ...), or  \
   * NULL with errno = EBADF if `fd` is not a TCP socket fastsock tracks. */                 \
  X(const char*, fastsock_transport, (int fd), (fd))                                        \
  /* Elements [offset, offset + count) of the array `base` of `type`. */                    \
  X(int, fastsock_send_array,                                                               \
    (int fd, const void* base, int type, size_t offset, size_t count),                      \
    (fd, base, type, offset, count))                                                        \
  X(int, fastsock_recv_array, (int fd, void* base, int type, size_t offset, size_t count), \
    (fd, base, type, offset, count))                                                        \
  /* Non-blocking, resumable: *done is the number of bytes of the portion moved so far     \
   * (start at 0). Returns 0 when complete, or -1 with EAGAIN when the socket takes or has  \
   * no more now (call again with the same arguments after poll()), or another errno. */    \
  X(int, fastsock_send_array_nb,                                                            \
    (int fd, const void* base, int type, size_t offset, size_t count, size_t* done),        \
    (fd, base, type, offset, count, done))                                                  \
  X(int, fastsock_recv_array_nb,                                                            \
    (int fd, void* base, int type, size_t offset, size_t count, size_t* done),              \
    (fd, base, type, offset, count, done))                                                  \
  /* Strided gather/scatter (MPJ Express strGather/strScatter): `blocks` blocks of          \
   * `blocklen` elements, block i starting at element offset + i * stride; sent as one      \
   * contiguous run, received into the same places. */                                     \
  X(int, fastsock_send_strided,                                                             \
    (int fd, const void* base, int type, size_t offset, size_t blocks, size_t stride,      \
     size_t blocklen),                                                                      \
    (fd, base, type, offset, blocks, stride, blocklen))                                     \
  X(int, fastsock_recv_strided,                                                             \
    (int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,            \
     size_t blocklen),                                                                      \
    (fd, base, type, offset, blocks, stride, blocklen))                                     \
  /* Non-blocking, resumable strided: as fastsock_send_array_nb, *done counting the bytes of \
   * the selection (blocks back to back) moved so far. */                                   \
  X(int, fastsock_send_strided_nb,                                                          \
    (int fd, const void* base, int type, size_t offset, size_t blocks, size_t stride,      \
     size_t blocklen, size_t* done),                                                        \
    (fd, base, type, offset, blocks, stride, blocklen, done))                               \
  X(int, fastsock_recv_strided_nb,                                                          \
    (int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,            \
     size_t blocklen, size_t* done),                                                        \
    (fd, base, type, offset, blocks, stride, blocklen, done))                               \
  /* Multi-strided region (MPJ Express's multi-strided buffering): levels[0..nlevels) of    \
   * (count, stride), outer to inner, over blocks of `blocklen` elements; the block with    \
   * level indices (i0, i1, ...) starts at element offset + i0*stride0 + i1*stride1 + ...,  \
   * the innermost level varying fastest. E.g. a sub-cube of a 3-D array. */               \
  X(int, fastsock_send_multistrided,                                                        \
    (int fd, const void* base, int type, size_t offset, const struct fastsock_level* levels,\
     size_t nlevels, size_t blocklen),                                                      \
    (fd, base, type, offset, levels, nlevels, blocklen))                                    \
  X(int, fastsock_recv_multistrided,                                                        \
    (int fd, void* base, int type, size_t offset, const struct fastsock_level* levels,      \
     size_t nlevels, size_t blocklen),                                                      \
    (fd, base, type, offset, levels, nlevels, blocklen))                                    \
  X(int, fastsock_send_multistrided_nb,                                                     \
    (int fd, const void* base, int type, size_t offset, const struct fastsock_level* levels,\
     size_t nlevels, size_t blocklen, size_t* done),                                        \
    (fd, base, type, offset, levels, nlevels, blocklen, done))                              \
  X(int, fastsock_recv_multistrided_nb,                                                     \
    (int fd, void* base, int type, size_t offset, const struct fastsock_level* levels,      \
     size_t nlevels, size_t blocklen, size_t* done),                                        \
    (fd, base, type, offset, levels, nlevels, blocklen, done))                              \
  /* Indexed gather/scatter (MPJ Express gather/scatter): elements base[indices[i]]. */      \
  X(int, fastsock_send_indexed,                                                             \
    (int fd, const void* base, int type, const size_t* indices, size_t count),              \
    (fd, base, type, indices, count))                                                       \
  X(int, fastsock_recv_indexed,                                                             \
    (int fd, void* base, int type, const size_t* indices, size_t count),                    \
    (fd, base, type, indices, count))                                                       \
  X(int, fastsock_send_indexed_nb,                                                          \
    (int fd, const void* base, int type, const size_t* indices, size_t count, size_t* done),\
    (fd, base, type, indices, count, done))                                                 \
  X(int, fastsock_recv_indexed_nb,                                                          \
    (int fd, void* base, int type, const size_t* indices, size_t count, size_t* done),      \
    (fd, base, type, indices, count, done))                                                 \
  /* The byte order `fd`'s peer sends in (default: ours). Typed receives convert elements   \
   * when it differs. Setting it is for a transport's handshake, or a test simulating a     \
   * foreign peer. -1 with EBADF if `fd` is not a TCP socket fastsock tracks (and ENOSYS     \
   * for the shim without the library), EINVAL for an unknown order. */                      \
  X(int, fastsock_set_peer_byte_order, (int fd, int order), (fd, order))                    \
  X(int, fastsock_peer_byte_order, (int fd), (fd))

#if !defined(FASTSOCK_DYNAMIC) || defined(FASTSOCK_BUILDING_LIBRARY)
#define FASTSOCK_DECLARE(ret, name, params, args) FASTSOCK_API ret name params;
FASTSOCK_API_LIST(FASTSOCK_DECLARE)
#undef FASTSOCK_DECLARE
#endif

#ifdef __cplusplus
}
#endif

#if defined(FASTSOCK_DYNAMIC) && !defined(FASTSOCK_BUILDING_LIBRARY)
#include "fastsock/fastsock_dynamic.h"
#endif

#endif /* FASTSOCK_FASTSOCK_H */
