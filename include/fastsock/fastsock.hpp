// fastsock C++20 wrappers over the typed-array C API (fastsock.h, docs/api.md).
//
// Arrays are std::span<T> of an arithmetic T (no other element type compiles); results are
// std::error_code (no exceptions). Define FASTSOCK_DYNAMIC before including to use the
// run-time lookup shim instead of linking with -lfastsock, as with fastsock.h.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <type_traits>
#include <vector>

#include "fastsock/fastsock.h"

namespace fastsock {

template <typename T>
concept Element = std::is_arithmetic_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 ||
                                              sizeof(T) == 4 || sizeof(T) == 8);

// The C API's element type for T. (char and bool travel as bytes; long double is not an
// Element: it has no fixed-width wire form.)
template <Element T>
constexpr int element_type() noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float and double only");
    return sizeof(T) == 4 ? FASTSOCK_FLOAT : FASTSOCK_DOUBLE;
  } else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, bool>) {
    return FASTSOCK_BYTE;
  } else if constexpr (std::is_signed_v<T>) {
    return sizeof(T) == 1 ? FASTSOCK_INT8 : sizeof(T) == 2 ? FASTSOCK_INT16
         : sizeof(T) == 4 ? FASTSOCK_INT32 : FASTSOCK_INT64;
  } else {
    return sizeof(T) == 1 ? FASTSOCK_UINT8 : sizeof(T) == 2 ? FASTSOCK_UINT16
         : sizeof(T) == 4 ? FASTSOCK_UINT32 : FASTSOCK_UINT64;
  }
}

namespace detail {
// Does the strided selection lie within an array of `size` elements?
constexpr bool strided_fits(std::size_t size, std::size_t offset, std::size_t blocks,
                            std::size_t stride, std::size_t blocklen) noexcept {
  std::size_t end = 0;
  if (blocks > 0 && blocklen > 0 &&
      (__builtin_mul_overflow(blocks - 1, stride, &end) ||
       __builtin_add_overflow(end, blocklen, &end)))
    return false;
  return !__builtin_add_overflow(end, offset, &end) && end <= size;
}
// Does the multi-strided selection lie within an array of `size` elements? (An empty level
// or block selects nothing, which always fits.)
inline bool multistrided_fits(std::size_t size, std::size_t offset,
                              std::span<const fastsock_level> levels,
                              std::size_t blocklen) noexcept {
  std::size_t end = 0, reach = 0;
  if (blocklen == 0) return true;
  for (const fastsock_level& l : levels)
    if (l.count == 0) return true;
  for (const fastsock_level& l : levels)
    if (__builtin_mul_overflow(l.count - 1, l.stride, &reach) ||
        __builtin_add_overflow(end, reach, &end))
      return false;
  return !__builtin_add_overflow(end, blocklen, &end) &&
         !__builtin_add_overflow(end, offset, &end) && end <= size;
}
inline std::error_code result(int rc) noexcept {
  return rc == 0 ? std::error_code{} : std::error_code(errno, std::generic_category());
}
}  // namespace detail

// The whole span, or an error (nothing sent on a bad argument).
template <Element T>
std::error_code send(int fd, std::span<const T> data) noexcept {
  return detail::result(fastsock_send_array(fd, data.data(), element_type<T>(), 0, data.size()));
}
template <Element T>
std::error_code send(int fd, std::span<T> data) noexcept {
  return send(fd, std::span<const T>(data));
}
template <Element T>
std::error_code send(int fd, const std::vector<T>& data) noexcept {
  return send(fd, std::span<const T>(data));
}

// Fills the whole span (converting from a foreign-order peer).
template <Element T>
std::error_code recv(int fd, std::span<T> into) noexcept {
  return detail::result(fastsock_recv_array(fd, into.data(), element_type<T>(), 0, into.size()));
}

// Receives `count` elements into a vector resized to hold them. (Not noexcept: the resize
// may throw std::bad_alloc.)
template <Element T>
std::error_code recv(int fd, std::vector<T>& into, std::size_t count) {
  into.resize(count);
  return recv(fd, std::span<T>(into));
}

// Strided and indexed gather/scatter (see fastsock.h), over the span as the whole array: a
// selection reaching past its end is EINVAL, checked here before anything moves.
template <Element T>
std::error_code send_strided(int fd, std::span<const T> array, std::size_t offset,
                             std::size_t blocks, std::size_t stride,
                             std::size_t blocklen) noexcept {
  if (!detail::strided_fits(array.size(), offset, blocks, stride, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_send_strided(fd, array.data(), element_type<T>(), offset,
                                              blocks, stride, blocklen));
}
template <Element T>
std::error_code recv_strided(int fd, std::span<T> array, std::size_t offset,
                             std::size_t blocks, std::size_t stride,
                             std::size_t blocklen) noexcept {
  if (!detail::strided_fits(array.size(), offset, blocks, stride, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_recv_strided(fd, array.data(), element_type<T>(), offset,
                                              blocks, stride, blocklen));
}
template <Element T>
std::error_code send_indexed(int fd, std::span<const T> array,
                             std::span<const std::size_t> indices) noexcept {
  for (std::size_t i : indices)
    if (i >= array.size()) return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_send_indexed(fd, array.data(), element_type<T>(),
                                              indices.data(), indices.size()));
}
template <Element T>
std::error_code recv_indexed(int fd, std::span<T> array,
                             std::span<const std::size_t> indices) noexcept {
  for (std::size_t i : indices)
    if (i >= array.size()) return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_recv_indexed(fd, array.data(), element_type<T>(),
                                              indices.data(), indices.size()));
}

// Non-blocking, resumable selections (see fastsock.h): `done` counts the selection's bytes
// moved so far (start at 0). An empty error_code when complete;
// std::errc::resource_unavailable_try_again when the socket takes or has no more now (poll,
// then call again with the same arguments).
template <Element T>
std::error_code send_strided_nb(int fd, std::span<const T> array, std::size_t offset,
                                std::size_t blocks, std::size_t stride, std::size_t blocklen,
                                std::size_t& done) noexcept {
  if (!detail::strided_fits(array.size(), offset, blocks, stride, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_send_strided_nb(fd, array.data(), element_type<T>(), offset,
                                                 blocks, stride, blocklen, &done));
}
template <Element T>
std::error_code recv_strided_nb(int fd, std::span<T> array, std::size_t offset,
                                std::size_t blocks, std::size_t stride, std::size_t blocklen,
                                std::size_t& done) noexcept {
  if (!detail::strided_fits(array.size(), offset, blocks, stride, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_recv_strided_nb(fd, array.data(), element_type<T>(), offset,
                                                 blocks, stride, blocklen, &done));
}
template <Element T>
std::error_code send_indexed_nb(int fd, std::span<const T> array,
                                std::span<const std::size_t> indices,
                                std::size_t& done) noexcept {
  for (std::size_t i : indices)
    if (i >= array.size()) return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_send_indexed_nb(fd, array.data(), element_type<T>(),
                                                 indices.data(), indices.size(), &done));
}
template <Element T>
std::error_code recv_indexed_nb(int fd, std::span<T> array, std::span<const std::size_t> indices,
                                std::size_t& done) noexcept {
  for (std::size_t i : indices)
    if (i >= array.size()) return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_recv_indexed_nb(fd, array.data(), element_type<T>(),
                                                 indices.data(), indices.size(), &done));
}

// Multi-strided regions (see fastsock.h): `levels` outer to inner over blocks of `blocklen`.
template <Element T>
std::error_code send_multistrided(int fd, std::span<const T> array, std::size_t offset,
                                  std::span<const fastsock_level> levels,
                                  std::size_t blocklen) noexcept {
  if (!detail::multistrided_fits(array.size(), offset, levels, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_send_multistrided(fd, array.data(), element_type<T>(), offset,
                                                   levels.data(), levels.size(), blocklen));
}
template <Element T>
std::error_code recv_multistrided(int fd, std::span<T> array, std::size_t offset,
                                  std::span<const fastsock_level> levels,
                                  std::size_t blocklen) noexcept {
  if (!detail::multistrided_fits(array.size(), offset, levels, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_recv_multistrided(fd, array.data(), element_type<T>(), offset,
                                                   levels.data(), levels.size(), blocklen));
}
template <Element T>
std::error_code send_multistrided_nb(int fd, std::span<const T> array, std::size_t offset,
                                     std::span<const fastsock_level> levels,
                                     std::size_t blocklen, std::size_t& done) noexcept {
  if (!detail::multistrided_fits(array.size(), offset, levels, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_send_multistrided_nb(fd, array.data(), element_type<T>(),
                                                      offset, levels.data(), levels.size(),
                                                      blocklen, &done));
}
template <Element T>
std::error_code recv_multistrided_nb(int fd, std::span<T> array, std::size_t offset,
                                     std::span<const fastsock_level> levels,
                                     std::size_t blocklen, std::size_t& done) noexcept {
  if (!detail::multistrided_fits(array.size(), offset, levels, blocklen))
    return std::make_error_code(std::errc::invalid_argument);
  return detail::result(fastsock_recv_multistrided_nb(fd, array.data(), element_type<T>(),
                                                      offset, levels.data(), levels.size(),
                                                      blocklen, &done));
}

}  // namespace fastsock
