#include "api_array.hpp"

#include <cerrno>

#include "fastsock/fastsock.h"
#include "api_zerocopy.hpp"
#include "fd_table.hpp"
#include "ops.hpp"
#include "user_io.hpp"

struct fastsock_io;
namespace fastsock::api {
namespace {
const fastsock_io* library_io() noexcept;
}  // namespace
}  // namespace fastsock::api

#define FASTSOCK_PORTABLE_IO ::fastsock::api::library_io()
#include "fastsock/fastsock_portable.h"

namespace fastsock::api {
namespace {

// ops return -errno; fastsock_portable.h wants libc's convention.
ssize_t libc_style(long rc) noexcept {
  if (rc < 0) {
    errno = int(-rc);
    return -1;
  }
  return rc;
}

// The ops are not noexcept only so that a thread cancellation can unwind through them
// (ops.hpp); these wrappers must let that unwind pass too.
// A blocking send may go zerocopy on TCP (it waits for the kernel's completion, which
// keeps the calls' contract: the array is free when they return); a non-blocking step
// returns before any completion could be awaited, so it always copies.
ssize_t lib_sendmsg(int fd, const msghdr* msg, int flags) {
  return libc_style(flags & MSG_DONTWAIT ? ops::sendmsg(fd, msg, flags)
                                         : zerocopy::sendmsg(fd, msg, flags));
}
ssize_t lib_recvmsg(int fd, msghdr* msg, int flags) {
  return libc_style(ops::recvmsg(fd, msg, flags));
}
int lib_poll(pollfd* fds, nfds_t n, int timeout) {
  return int(libc_style(ops::poll(fds, n, timeout)));
}
// The element type out of band, where the fd's link carries it (Transport::typed).
int lib_typed(int fd, int begin, int sending, int type, size_t bytes) {
  // Single bytes (FASTSOCK_BYTE, INT8, UINT8) have no order and agree with any type.
  if (fastsock_type_size(type) <= 1) return 0;
  SocketRef s = fd_table::lookup(fd);
  Transport* link = s ? ops::user_link(*s) : nullptr;
  return link ? int(libc_style(link->typed(*s, begin != 0, sending != 0, type, bytes))) : 0;
}
int lib_peer_order(int fd) {
  const int order = peer_byte_order(fd);
  return order > 0 ? order : fastsock_native_byte_order();
}

const fastsock_io* library_io() noexcept {
  static const fastsock_io io = {lib_sendmsg, lib_recvmsg, lib_poll, lib_peer_order, lib_typed};
  return &io;
}

}  // namespace

int send_array(int fd, const void* base, int type, size_t offset, size_t count) {
  return fastsock_portable_send_array(fd, base, type, offset, count);
}
int recv_array(int fd, void* base, int type, size_t offset, size_t count) {
  return fastsock_portable_recv_array(fd, base, type, offset, count);
}
int send_array_nb(int fd, const void* base, int type, size_t offset, size_t count,
                  size_t* done) {
  return fastsock_portable_send_array_nb(fd, base, type, offset, count, done);
}
int recv_array_nb(int fd, void* base, int type, size_t offset, size_t count, size_t* done) {
  return fastsock_portable_recv_array_nb(fd, base, type, offset, count, done);
}
int send_strided(int fd, const void* base, int type, size_t offset, size_t blocks,
                 size_t stride, size_t blocklen) {
  return fastsock_portable_send_strided(fd, base, type, offset, blocks, stride, blocklen);
}
int recv_strided(int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,
                 size_t blocklen) {
  return fastsock_portable_recv_strided(fd, base, type, offset, blocks, stride, blocklen);
}
int send_indexed(int fd, const void* base, int type, const size_t* indices,
                 size_t count) {
  return fastsock_portable_send_indexed(fd, base, type, indices, count);
}
int recv_indexed(int fd, void* base, int type, const size_t* indices, size_t count) {
  return fastsock_portable_recv_indexed(fd, base, type, indices, count);
}

int send_strided_nb(int fd, const void* base, int type, size_t offset, size_t blocks,
                    size_t stride, size_t blocklen, size_t* done) {
  return fastsock_portable_send_strided_nb(fd, base, type, offset, blocks, stride, blocklen,
                                           done);
}
int recv_strided_nb(int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,
                    size_t blocklen, size_t* done) {
  return fastsock_portable_recv_strided_nb(fd, base, type, offset, blocks, stride, blocklen,
                                           done);
}
int send_indexed_nb(int fd, const void* base, int type, const size_t* indices, size_t count,
                    size_t* done) {
  return fastsock_portable_send_indexed_nb(fd, base, type, indices, count, done);
}
int recv_indexed_nb(int fd, void* base, int type, const size_t* indices, size_t count,
                    size_t* done) {
  return fastsock_portable_recv_indexed_nb(fd, base, type, indices, count, done);
}
int send_multistrided(int fd, const void* base, int type, size_t offset,
                      const fastsock_level* levels, size_t nlevels, size_t blocklen) {
  return fastsock_portable_send_multistrided(fd, base, type, offset, levels, nlevels, blocklen);
}
int recv_multistrided(int fd, void* base, int type, size_t offset, const fastsock_level* levels,
                      size_t nlevels, size_t blocklen) {
  return fastsock_portable_recv_multistrided(fd, base, type, offset, levels, nlevels, blocklen);
}
int send_multistrided_nb(int fd, const void* base, int type, size_t offset,
                         const fastsock_level* levels, size_t nlevels, size_t blocklen,
                         size_t* done) {
  return fastsock_portable_send_multistrided_nb(fd, base, type, offset, levels, nlevels,
                                                blocklen, done);
}
int recv_multistrided_nb(int fd, void* base, int type, size_t offset,
                         const fastsock_level* levels, size_t nlevels, size_t blocklen,
                         size_t* done) {
  return fastsock_portable_recv_multistrided_nb(fd, base, type, offset, levels, nlevels,
                                                blocklen, done);
}

int set_peer_byte_order(int fd, int order) noexcept {
  if (order != FASTSOCK_ORDER_LITTLE && order != FASTSOCK_ORDER_BIG) return -EINVAL;
  SocketRef s = fd_table::lookup(fd);
  if (!s) return -EBADF;
  s->peer_byte_order.store(uint8_t(order), std::memory_order_relaxed);
  return 0;
}

int peer_byte_order(int fd) noexcept {
  SocketRef s = fd_table::lookup(fd);
  if (!s) return -EBADF;
  const uint8_t order = s->peer_byte_order.load(std::memory_order_relaxed);
  return order ? order : fastsock_native_byte_order();
}

}  // namespace fastsock::api
