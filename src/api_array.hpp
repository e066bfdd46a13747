// Core side of the typed-array C API (include/fastsock/fastsock.h, docs/api.md): the one
// implementation of fastsock_portable.h, moving bytes with the library's own data paths
// (ops::sendmsg/recvmsg: an shm connection's ring and handoff, TCP's sendmsg/recvmsg), so
// a whole array goes to the link in one call and no staging copy is made.
#pragma once

#include <cstddef>

struct fastsock_level;

namespace fastsock::api {

// Not noexcept: they block in the data calls, which a thread cancellation unwinds (ops.hpp).

int send_array(int fd, const void* base, int type, size_t offset, size_t count);
int recv_array(int fd, void* base, int type, size_t offset, size_t count);
int send_array_nb(int fd, const void* base, int type, size_t offset, size_t count,
                  size_t* done);
int recv_array_nb(int fd, void* base, int type, size_t offset, size_t count, size_t* done);
int send_strided(int fd, const void* base, int type, size_t offset, size_t blocks,
                 size_t stride, size_t blocklen);
int recv_strided(int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,
                 size_t blocklen);
int send_indexed(int fd, const void* base, int type, const size_t* indices,
                 size_t count);
int recv_indexed(int fd, void* base, int type, const size_t* indices, size_t count);
int send_strided_nb(int fd, const void* base, int type, size_t offset, size_t blocks,
                    size_t stride, size_t blocklen, size_t* done);
int recv_strided_nb(int fd, void* base, int type, size_t offset, size_t blocks, size_t stride,
                    size_t blocklen, size_t* done);
int send_indexed_nb(int fd, const void* base, int type, const size_t* indices, size_t count,
                    size_t* done);
int recv_indexed_nb(int fd, void* base, int type, const size_t* indices, size_t count,
                    size_t* done);
int send_multistrided(int fd, const void* base, int type, size_t offset,
                      const fastsock_level* levels, size_t nlevels, size_t blocklen);
int recv_multistrided(int fd, void* base, int type, size_t offset, const fastsock_level* levels,
                      size_t nlevels, size_t blocklen);
int send_multistrided_nb(int fd, const void* base, int type, size_t offset,
                         const fastsock_level* levels, size_t nlevels, size_t blocklen,
                         size_t* done);
int recv_multistrided_nb(int fd, void* base, int type, size_t offset,
                         const fastsock_level* levels, size_t nlevels, size_t blocklen,
                         size_t* done);
// The byte order (FASTSOCK_ORDER_*) of `fd`'s peer: 0 or -errno when setting.
int set_peer_byte_order(int fd, int order) noexcept;
// FASTSOCK_ORDER_* or -errno.
int peer_byte_order(int fd) noexcept;

}  // namespace fastsock::api
