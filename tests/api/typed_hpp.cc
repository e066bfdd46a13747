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
