/* The FASTSOCK_DYNAMIC shim (included by fastsock.h; see there): each fastsock_* call looks
 * up the library's entry point once with dlsym(RTLD_DEFAULT, ...), so a program that is not
 * linked with -lfastsock uses the library when it runs under LD_PRELOAD, and otherwise the
 * same typed-array semantics over libc's sendmsg/recvmsg (fastsock_portable.h).
 */
#ifndef FASTSOCK_DYNAMIC_H
#define FASTSOCK_DYNAMIC_H

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* glibc's RTLD_DEFAULT (the global scope), which <dlfcn.h> only defines with _GNU_SOURCE. */
#define FASTSOCK__RTLD_DEFAULT ((void*)0)

static inline int fastsock__native_peer_order(int fd) {
  (void)fd;
  return fastsock_native_byte_order();
}

/* libc's calls: what the shim moves bytes with when the library is absent. */
struct fastsock_io;
static inline const struct fastsock_io* fastsock__libc_io(void);
#define FASTSOCK_PORTABLE_IO fastsock__libc_io()
#include "fastsock/fastsock_portable.h"
static inline const struct fastsock_io* fastsock__libc_io(void) {
  static const struct fastsock_io io = {sendmsg, recvmsg, poll, fastsock__native_peer_order,
                                        NULL};
  return &io;
}

/* The fallbacks, one per entry point. */
static inline const char* fastsock__fallback_fastsock_version(void) { return NULL; }
static inline const char* fastsock__fallback_fastsock_transport(int fd) {
  (void)fd;
  errno = EBADF; /* no fastsock: no descriptor is tracked */
  return NULL;
}
#define FASTSOCK__FORWARD(name, params, args) \
  static inline int fastsock__fallback_fastsock_##name params { return fastsock_portable_##name args; }
FASTSOCK__FORWARD(send_array, (int fd, const void* base, int type, size_t offset, size_t count),
                  (fd, base, type, offset, count))
FASTSOCK__FORWARD(recv_array, (int fd, void* base, int type, size_t offset, size_t count),
                  (fd, base, type, offset, count))
FASTSOCK__FORWARD(send_array_nb,
                  (int fd, const void* base, int type, size_t offset, size_t count, size_t* done),
                  (fd, base, type, offset, count, done))
FASTSOCK__FORWARD(recv_array_nb,
                  (int fd, void* base, int type, size_t offset, size_t count, size_t* done),
                  (fd, base, type, offset, count, done))
FASTSOCK__FORWARD(send_strided,
                  (int fd, const void* base, int type, size_t offset, size_t blocks,
                   size_t stride, size_t blocklen),
                  (fd, base, type, offset, blocks, stride, blocklen))
FASTSOCK__FORWARD(recv_strided,
                  (int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,
                   size_t blocklen),
                  (fd, base, type, offset, blocks, stride, blocklen))
FASTSOCK__FORWARD(send_indexed,
                  (int fd, const void* base, int type, const size_t* indices, size_t count),
                  (fd, base, type, indices, count))
FASTSOCK__FORWARD(recv_indexed,
                  (int fd, void* base, int type, const size_t* indices, size_t count),
                  (fd, base, type, indices, count))
FASTSOCK__FORWARD(send_strided_nb,
                  (int fd, const void* base, int type, size_t offset, size_t blocks,
                   size_t stride, size_t blocklen, size_t* done),
                  (fd, base, type, offset, blocks, stride, blocklen, done))
FASTSOCK__FORWARD(recv_strided_nb,
                  (int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,
                   size_t blocklen, size_t* done),
                  (fd, base, type, offset, blocks, stride, blocklen, done))
FASTSOCK__FORWARD(send_indexed_nb,
                  (int fd, const void* base, int type, const size_t* indices, size_t count,
                   size_t* done),
                  (fd, base, type, indices, count, done))
FASTSOCK__FORWARD(recv_indexed_nb,
                  (int fd, void* base, int type, const size_t* indices, size_t count,
                   size_t* done),
                  (fd, base, type, indices, count, done))
FASTSOCK__FORWARD(send_multistrided,
                  (int fd, const void* base, int type, size_t offset,
                   const struct fastsock_level* levels, size_t nlevels, size_t blocklen),
                  (fd, base, type, offset, levels, nlevels, blocklen))
FASTSOCK__FORWARD(recv_multistrided,
                  (int fd, void* base, int type, size_t offset,
                   const struct fastsock_level* levels, size_t nlevels, size_t blocklen),
                  (fd, base, type, offset, levels, nlevels, blocklen))
FASTSOCK__FORWARD(send_multistrided_nb,
                  (int fd, const void* base, int type, size_t offset,
                   const struct fastsock_level* levels, size_t nlevels, size_t blocklen,
                   size_t* done),
                  (fd, base, type, offset, levels, nlevels, blocklen, done))
FASTSOCK__FORWARD(recv_multistrided_nb,
                  (int fd, void* base, int type, size_t offset,
                   const struct fastsock_level* levels, size_t nlevels, size_t blocklen,
                   size_t* done),
                  (fd, base, type, offset, levels, nlevels, blocklen, done))
#undef FASTSOCK__FORWARD
static inline int fastsock__fallback_fastsock_set_peer_byte_order(int fd, int order) {
  (void)fd;
  (void)order;
  errno = ENOSYS; /* without the library the peer's order is always taken to be ours */
  return -1;
}
static inline int fastsock__fallback_fastsock_peer_byte_order(int fd) {
  if (!fastsock__fd_ok(fd)) {
    errno = EBADF;
    return -1;
  }
  return fastsock_native_byte_order();
}

/* Marks "looked up, not there" in a shim's cache. */
static char fastsock__absent;

#define FASTSOCK__SHIM(ret, name, params, args)                                    \
  static inline ret name params {                                                  \
    typedef ret(*fastsock__fn) params;                                             \
    static void* cached;                                                           \
    fastsock__fn fn;                                                               \
    void* p = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);                          \
    if (p == NULL) {                                                               \
      p = dlsym(FASTSOCK__RTLD_DEFAULT, #name);                                    \
      if (p == NULL) p = &fastsock__absent;                                        \
      __atomic_store_n(&cached, p, __ATOMIC_RELEASE);                              \
    }                                                                              \
    if (p == (void*)&fastsock__absent) return fastsock__fallback_##name args;      \
    memcpy(&fn, &p, sizeof fn); /* (object to function pointer: POSIX's way) */    \
    return fn args;                                                                \
  }
FASTSOCK_API_LIST(FASTSOCK__SHIM)
#undef FASTSOCK__SHIM

#endif /* FASTSOCK_DYNAMIC_H */
