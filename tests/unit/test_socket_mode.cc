// SocketMode: what socket() made is known without asking the kernel, a forget() makes it
// ask again, and the close-on-exec flag is remembered for one descriptor only.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "socket_mode.hpp"

using namespace fastsock;

namespace {
struct TcpSocket {
  explicit TcpSocket(int type_flags) : fd(::socket(AF_INET, SOCK_STREAM | type_flags, 0)) {
    REQUIRE(fd >= 0);
  }
  ~TcpSocket() { ::close(fd); }
  int fd;
};

void set_rcvtimeo_ms(int fd, long ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  REQUIRE(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
}
}  // namespace

TEST_CASE("a socket's mode as socket() made it is known without asking the kernel") {
  TcpSocket s(SOCK_NONBLOCK | SOCK_CLOEXEC);
  SocketMode mode;
  mode.made(s.fd, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC);
  // Changed behind the mode's back (the core's hooks would have called forget()): the
  // values socket() gave are still what it answers, so it did not ask.
  REQUIRE(::fcntl(s.fd, F_SETFL, 0) == 0);
  REQUIRE(::fcntl(s.fd, F_SETFD, 0) == 0);
  set_rcvtimeo_ms(s.fd, 1500);
  CHECK(mode.nonblocking(s.fd));
  CHECK(mode.close_on_exec(s.fd) == 1);
  CHECK(mode.timeout_us(s.fd, SO_RCVTIMEO) == 0);
  CHECK(mode.timeout_us(s.fd, SO_SNDTIMEO) == 0);
  // After forget() every value is the kernel's again.
  mode.forget();
  CHECK_FALSE(mode.nonblocking(s.fd));
  CHECK(mode.close_on_exec(s.fd) == 0);
  CHECK(mode.timeout_us(s.fd, SO_RCVTIMEO) == 1'500'000);
  CHECK(mode.timeout_us(s.fd, SO_SNDTIMEO) == 0);
}

TEST_CASE("a socket made without flags is blocking and inherited by exec") {
  TcpSocket s(0);
  SocketMode mode;
  mode.made(s.fd, SOCK_STREAM);
  CHECK_FALSE(mode.nonblocking(s.fd));
  CHECK(mode.close_on_exec(s.fd) == 0);
}

TEST_CASE("close-on-exec is remembered per descriptor, not per socket") {
  TcpSocket s(0);
  SocketMode mode;
  mode.made(s.fd, SOCK_STREAM);
  // A dup of the same socket with its own flag: asked of the kernel, not taken from s.fd.
  const int dup = ::fcntl(s.fd, F_DUPFD_CLOEXEC, 0);
  REQUIRE(dup >= 0);
  CHECK(mode.close_on_exec(dup) == 1);
  CHECK(mode.close_on_exec(s.fd) == 0);  // asked again too: only the last one is kept
  ::close(dup);
  // A descriptor the kernel does not know: no answer, nothing kept.
  CHECK(mode.close_on_exec(dup) == -1);
}
