// The C API of include/fastsock/fastsock.h that the library itself implements.
#include "fastsock/fastsock.h"

#include <cerrno>

#include "fastsock_build_config.h"
#include "api.hpp"
#include "api_array.hpp"
#include "hook.hpp"

const char* fastsock_version(void) { return FASTSOCK_VERSION; }

const char* fastsock_transport(int fd) {
  const char* name = fastsock::api::transport_of(fd);
  if (!name) errno = EBADF;
  return name;
}

// Typed arrays (api_array.cc). They set errno themselves, as libc calls do.
int fastsock_send_array(int fd, const void* base, int type, size_t offset, size_t count) {
  return fastsock::api::send_array(fd, base, type, offset, count);
}
int fastsock_recv_array(int fd, void* base, int type, size_t offset, size_t count) {
  return fastsock::api::recv_array(fd, base, type, offset, count);
}
int fastsock_send_array_nb(int fd, const void* base, int type, size_t offset, size_t count,
                           size_t* done) {
  return fastsock::api::send_array_nb(fd, base, type, offset, count, done);
}
int fastsock_recv_array_nb(int fd, void* base, int type, size_t offset, size_t count,
                           size_t* done) {
  return fastsock::api::recv_array_nb(fd, base, type, offset, count, done);
}
int fastsock_send_strided(int fd, const void* base, int type, size_t offset, size_t blocks,
                          size_t stride, size_t blocklen) {
  return fastsock::api::send_strided(fd, base, type, offset, blocks, stride, blocklen);
}
int fastsock_recv_strided(int fd, void* base, int type, size_t offset, size_t blocks,
                          size_t stride, size_t blocklen) {
  return fastsock::api::recv_strided(fd, base, type, offset, blocks, stride, blocklen);
}
int fastsock_send_indexed(int fd, const void* base, int type, const size_t* indices,
                          size_t count) {
  return fastsock::api::send_indexed(fd, base, type, indices, count);
}
int fastsock_recv_indexed(int fd, void* base, int type, const size_t* indices, size_t count) {
  return fastsock::api::recv_indexed(fd, base, type, indices, count);
}

int fastsock_send_strided_nb(int fd, const void* base, int type, size_t offset, size_t blocks,
                             size_t stride, size_t blocklen, size_t* done) {
  return fastsock::api::send_strided_nb(fd, base, type, offset, blocks, stride, blocklen, done);
}
int fastsock_recv_strided_nb(int fd, void* base, int type, size_t offset, size_t blocks,
                             size_t stride, size_t blocklen, size_t* done) {
  return fastsock::api::recv_strided_nb(fd, base, type, offset, blocks, stride, blocklen, done);
}
int fastsock_send_indexed_nb(int fd, const void* base, int type, const size_t* indices,
                             size_t count, size_t* done) {
  return fastsock::api::send_indexed_nb(fd, base, type, indices, count, done);
}
int fastsock_recv_indexed_nb(int fd, void* base, int type, const size_t* indices, size_t count,
                             size_t* done) {
  return fastsock::api::recv_indexed_nb(fd, base, type, indices, count, done);
}
int fastsock_send_multistrided(int fd, const void* base, int type, size_t offset,
                               const fastsock_level* levels, size_t nlevels, size_t blocklen) {
  return fastsock::api::send_multistrided(fd, base, type, offset, levels, nlevels, blocklen);
}
int fastsock_recv_multistrided(int fd, void* base, int type, size_t offset,
                               const fastsock_level* levels, size_t nlevels, size_t blocklen) {
  return fastsock::api::recv_multistrided(fd, base, type, offset, levels, nlevels, blocklen);
}
int fastsock_send_multistrided_nb(int fd, const void* base, int type, size_t offset,
                                  const fastsock_level* levels, size_t nlevels, size_t blocklen,
                                  size_t* done) {
  return fastsock::api::send_multistrided_nb(fd, base, type, offset, levels, nlevels, blocklen,
                                             done);
}
int fastsock_recv_multistrided_nb(int fd, void* base, int type, size_t offset,
                                  const fastsock_level* levels, size_t nlevels, size_t blocklen,
                                  size_t* done) {
  return fastsock::api::recv_multistrided_nb(fd, base, type, offset, levels, nlevels, blocklen,
                                             done);
}

int fastsock_set_peer_byte_order(int fd, int order) {
  FASTSOCK_RETURN(int, fastsock::api::set_peer_byte_order(fd, order));
}
int fastsock_peer_byte_order(int fd) {
  FASTSOCK_RETURN(int, fastsock::api::peer_byte_order(fd));
}
