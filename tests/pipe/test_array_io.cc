// fastsock-pipe's array paths (array_io.hpp) over a socketpair in this process, which runs
// without libfastsock: the typed API is served by the FASTSOCK_DYNAMIC shim.
#include <catch2/catch.hpp>

#include <endian.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "array_io.hpp"

using namespace fastsock_pipe;

namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~Pair() {
    close(fd[0]);
    close(fd[1]);
  }
};

constexpr std::size_t kCount = 512;  // 4 KiB of doubles: fits the socket buffer, no thread

}  // namespace

TEST_CASE("array_io: which path each --api takes without the library") {
  CHECK(array_path(ElementType::float64, ArrayApi::typed) == ArrayPath::shim);
  CHECK(array_path(ElementType::int32, ArrayApi::typed) == ArrayPath::shim);
  CHECK(array_path(ElementType::float64, ArrayApi::plain) == ArrayPath::plain);
  CHECK(array_path(ElementType::float64, ArrayApi::portable) == ArrayPath::portable);
  // Bytes always move plain, whatever --api says.
  CHECK(array_path(ElementType::byte, ArrayApi::typed) == ArrayPath::plain);
  CHECK(array_path(ElementType::byte, ArrayApi::portable) == ArrayPath::plain);
  ArrayApi a = ArrayApi::typed;
  REQUIRE(parse_array_api("portable", a));
  CHECK(a == ArrayApi::portable);
  REQUIRE(parse_array_api("plain", a));
  CHECK(a == ArrayApi::plain);
  CHECK_FALSE(parse_array_api("xdr", a));
  CHECK_FALSE(valid_array_path(0));
  CHECK_FALSE(valid_array_path(kLastArrayPath + 1));
}

TEST_CASE("array_io: the typed (shim) and plain paths put the same native bytes on the wire") {
  std::vector<double> sent(kCount), got(kCount);
  for (std::size_t i = 0; i < kCount; ++i) sent[i] = 1.0 / static_cast<double>(i + 3);
  for (ArrayPath sender : {ArrayPath::shim, ArrayPath::plain}) {
    for (ArrayPath receiver : {ArrayPath::shim, ArrayPath::plain}) {
      Pair p;
      std::memset(got.data(), 0, kCount * 8);
      REQUIRE(send_array_message(p.fd[0], sender, ElementType::float64,
                                 reinterpret_cast<const uint8_t*>(sent.data()), kCount * 8, nullptr));
      REQUIRE(recv_array_message(p.fd[1], receiver, ElementType::float64,
                                 reinterpret_cast<uint8_t*>(got.data()), kCount * 8, nullptr));
      CHECK(std::memcmp(sent.data(), got.data(), kCount * 8) == 0);
    }
  }
}

TEST_CASE("array_io: the portable path sends big-endian elements and converts them back") {
  std::vector<int32_t> sent(kCount), got(kCount), wire(kCount);
  for (std::size_t i = 0; i < kCount; ++i) sent[i] = static_cast<int32_t>(i * 65599 + 7);
  std::vector<uint8_t> staging(kCount * 4);
  Pair p;
  REQUIRE(send_array_message(p.fd[0], ArrayPath::portable, ElementType::int32,
                             reinterpret_cast<const uint8_t*>(sent.data()), kCount * 4,
                             staging.data()));
  // A plain reader sees network order.
  REQUIRE(recv(p.fd[1], wire.data(), kCount * 4, MSG_WAITALL) == static_cast<ssize_t>(kCount * 4));
  for (std::size_t i = 0; i < kCount; ++i)
    CHECK(wire[i] == static_cast<int32_t>(htobe32(static_cast<uint32_t>(sent[i]))));
  // And a portable receiver gets the values back.
  REQUIRE(send(p.fd[1], wire.data(), kCount * 4, 0) == static_cast<ssize_t>(kCount * 4));
  REQUIRE(recv_array_message(p.fd[0], ArrayPath::portable, ElementType::int32,
                             reinterpret_cast<uint8_t*>(got.data()), kCount * 4, staging.data()));
  CHECK(got == sent);
}

TEST_CASE("array_io: a typed receive from a closed peer fails instead of hanging") {
  std::vector<double> got(kCount);
  Pair p;
  const double one = 1.0;
  REQUIRE(send(p.fd[0], &one, sizeof one, 0) == sizeof one);
  shutdown(p.fd[0], SHUT_WR);
  CHECK_FALSE(recv_array_message(p.fd[1], ArrayPath::shim, ElementType::float64,
                                 reinterpret_cast<uint8_t*>(got.data()), kCount * 8, nullptr));
}
