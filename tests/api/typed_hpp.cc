// typed_hpp: the C++ wrappers (fastsock.hpp) over one loopback TCP connection within this
// process: every arithmetic element type through std::span and into std::vector, strided
// and indexed selections, and the wrappers' bounds checks sending nothing. Built linked with
// -lfastsock and with FASTSOCK_DYNAMIC (then run without the library: the libc fallback).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fastsock/fastsock.hpp"

static_assert(fastsock::Element<double> && fastsock::Element<std::uint16_t>);
static_assert(!fastsock::Element<std::string> && !fastsock::Element<long double> &&
              !fastsock::Element<int*>);
static_assert(fastsock::element_type<std::int64_t>() == FASTSOCK_INT64 &&
              fastsock::element_type<float>() == FASTSOCK_FLOAT &&
              fastsock::element_type<char>() == FASTSOCK_BYTE);

#define CHECK(cond, what)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "FAIL line %d: %s (%s)\n", __LINE__, what, #cond); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

static int g_out, g_in;

template <typename T>
static void round_trip() {
  std::vector<T> src(500);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = T(i * 3 + 1);
  CHECK(!fastsock::send(g_out, std::span<const T>(src)), "send span");
  std::vector<T> got;
  CHECK(!fastsock::recv(g_in, got, src.size()), "recv into vector");
  CHECK(got == src, "vector content");
}

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(l >= 0 && bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
            listen(l, 1) == 0 && getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len) == 0,
        "listen");
  g_out = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(connect(g_out, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0, "connect");
  g_in = accept(l, nullptr, nullptr);
  CHECK(g_in >= 0, "accept");
  const char* transport = fastsock_transport(g_out);
  std::printf("transport: %s\n", transport ? transport : "(none)");

  round_trip<std::int8_t>();
  round_trip<std::uint8_t>();
  round_trip<std::int16_t>();
  round_trip<std::uint16_t>();
  round_trip<std::int32_t>();
  round_trip<std::uint32_t>();
  round_trip<std::int64_t>();
  round_trip<std::uint64_t>();
  round_trip<float>();
  round_trip<double>();
  round_trip<char>();
  std::printf("ok: 11 element types: std::span send, std::vector receive\n");

  std::vector<double> grid(8 * 8);
  for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = double(i);
  // Column 3 of an 8x8 row-major grid: 8 blocks of 1, stride 8.
  CHECK(!fastsock::send_strided(g_out, std::span<const double>(grid), 3, 8, 8, 1), "column");
  std::vector<double> column;
  CHECK(!fastsock::recv(g_in, column, 8), "column recv");
  for (std::size_t r = 0; r < 8; ++r) CHECK(column[r] == double(r * 8 + 3), "column value");
  const std::size_t idx[] = {63, 0, 9};
  CHECK(!fastsock::send_indexed(g_out, std::span<const double>(grid), std::span(idx)), "idx");
  std::vector<double> back(64, -1.0);
  CHECK(!fastsock::recv_indexed(g_in, std::span(back), std::span(idx)), "scatter");
  CHECK(back[63] == 63 && back[0] == 0 && back[9] == 9 && back[1] == -1, "scatter places");
  std::printf("ok: strided column gather, indexed gather and scatter\n");

  // A 4x4x4 cube's 2x2x2 centre: two levels over blocks of 2, against loops; then the same
  // through the nb wrappers (a small selection: complete in one step on an empty socket).
  std::vector<std::int32_t> cube(64), centre;
  for (std::size_t i = 0; i < cube.size(); ++i) cube[i] = std::int32_t(i * 7 + 1);
  const fastsock_level levels[] = {{2, 16}, {2, 4}};
  CHECK(!fastsock::send_multistrided(g_out, std::span<const std::int32_t>(cube), 21,
                                     std::span(levels), 2), "multistrided");
  CHECK(!fastsock::recv(g_in, centre, 8), "multistrided recv");
  for (std::size_t k = 0, x = 1; x < 3; ++x)
    for (std::size_t y = 1; y < 3; ++y)
      for (std::size_t z = 1; z < 3; ++z, ++k)
        CHECK(centre[k] == cube[x * 16 + y * 4 + z], "multistrided element");
  std::size_t sent = 0, got = 0;
  std::vector<std::int32_t> scattered(64, -1);
  CHECK(!fastsock::send_multistrided_nb(g_out, std::span<const std::int32_t>(cube), 21,
                                        std::span(levels), 2, sent) && sent == 32, "ms nb");
  CHECK(!fastsock::recv_multistrided_nb(g_in, std::span(scattered), 21, std::span(levels), 2,
                                        got) && got == 32, "ms nb recv");
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t x = i / 16, y = i / 4 % 4, z = i % 4;
    const bool in = x >= 1 && x < 3 && y >= 1 && y < 3 && z >= 1 && z < 3;
    CHECK(scattered[i] == (in ? cube[i] : -1), "multistrided nb scatter");
  }
  sent = got = 0;
  std::vector<double> col(64, -1.0);
  CHECK(!fastsock::send_strided_nb(g_out, std::span<const double>(grid), 3, 8, 8, 1, sent) &&
            sent == 64, "strided nb");
  CHECK(!fastsock::recv_strided_nb(g_in, std::span(col), 3, 8, 8, 1, got) && got == 64,
        "strided nb recv");
  for (std::size_t i = 0; i < 64; ++i)
    CHECK(col[i] == (i % 8 == 3 ? grid[i] : -1.0), "strided nb scatter");
  sent = got = 0;
  std::vector<double> back2(64, -1.0);
  CHECK(!fastsock::send_indexed_nb(g_out, std::span<const double>(grid), std::span(idx), sent) &&
            sent == 24, "indexed nb");
  CHECK(!fastsock::recv_indexed_nb(g_in, std::span(back2), std::span(idx), got) && got == 24,
        "indexed nb recv");
  CHECK(back2[63] == 63 && back2[0] == 0 && back2[9] == 9 && back2[1] == -1, "indexed nb");
  // Nothing more to read: an nb receive says "try again", keeping its progress.
  got = 0;
  CHECK(fastsock::recv_indexed_nb(g_in, std::span(back2), std::span(idx), got) ==
            std::errc::resource_unavailable_try_again && got == 0, "nb with nothing to read");
  std::printf("ok: multi-strided centre of a cube, strided/indexed/multi-strided nb\n");

  // Out of the span's bounds: EINVAL from the wrapper, nothing sent.
  CHECK(fastsock::send_strided(g_out, std::span<const double>(grid), 8, 8, 8, 1) ==
            std::errc::invalid_argument, "strided past the end");
  CHECK(fastsock::send_strided(g_out, std::span<const double>(grid), 0, SIZE_MAX, 8, 1) ==
            std::errc::invalid_argument, "strided overflow");
  const std::size_t bad[] = {1, 64};
  CHECK(fastsock::send_indexed(g_out, std::span<const double>(grid), std::span(bad)) ==
            std::errc::invalid_argument, "index past the end");
  CHECK(fastsock::send(g_out, std::span<const double>(static_cast<double*>(nullptr), 3)) ==
            std::errc::invalid_argument, "null span with a size");
  const fastsock_level past[] = {{2, 16}, {2, 4}};
  CHECK(fastsock::send_multistrided(g_out, std::span<const std::int32_t>(cube), 22,
                                    std::span(past), 2 + 21) == std::errc::invalid_argument,
        "multistrided past the end");
  const fastsock_level overflow[] = {{3, SIZE_MAX / 2}};
  CHECK(fastsock::send_multistrided(g_out, std::span<const std::int32_t>(cube), 0,
                                    std::span(overflow), 1) == std::errc::invalid_argument,
        "multistrided overflow");
  std::size_t none = 0;
  CHECK(fastsock::send_strided_nb(g_out, std::span<const double>(grid), 8, 8, 8, 1, none) ==
            std::errc::invalid_argument && none == 0, "strided nb past the end");
  const char marker = 'M';
  CHECK(write(g_out, &marker, 1) == 1, "marker");
  char first = 0;
  CHECK(read(g_in, &first, 1) == 1 && first == 'M', "nothing sent before the marker");
  std::printf("ok: out-of-bounds selections and a null span: EINVAL, nothing sent\n");
  close(g_out);
  close(g_in);
  close(l);
  std::printf("ok: all C++ checks passed\n");
  return 0;
}
