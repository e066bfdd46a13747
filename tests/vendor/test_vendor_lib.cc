// Unit tests for transports/vendor/vendor_lib.cc: loading a profile's library and resolving
// its entry points (all present, library missing or broken, symbol missing), and a round
// trip through the test vendor library (tests/vendor/tv.c) with its fault injection.
//
// The test library is described by a user profile in a rules file, parsed by the library's
// own configuration parser: the path a user profile takes in production.
#include "vendor_lib.hpp"
#include "vendor_probe.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "config.hpp"

using namespace fastsock;
using namespace fastsock::vendors;

namespace {

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) FAIL(name << " is not set (run this test through meson test)");
  return v;
}

// The profile a rules file line describes, through config_from as the library reads it.
Profile profile_from_rules(const std::string& line) {
  static std::string rules_path = "/rules";
  const Config c = config_from(
      [](const char* name) -> const char* {
        return std::strcmp(name, "FASTSOCK_RULES") == 0 ? rules_path.c_str() : nullptr;
      },
      line + "\n");
  INFO("rules: " << line << " -> " << c.error);
  REQUIRE_FALSE(c.pass_through_forced);
  REQUIRE(c.vendor_profiles.size() == 1);
  return c.vendor_profiles[0];
}

Profile tv_profile(const std::string& extra = "") {
  return profile_from_rules("vendor tv library=" + env_or_fail("TV_LIB") +
                            " names=prefix:tv " + extra);
}

bool asan_in_process() { return dlsym(RTLD_DEFAULT, "__asan_init") != nullptr; }

// Sets an environment variable for one scope (the test library reads its faults from it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A private directory for the test library's socket files ($TV_DIR).
class TvDir {
 public:
  TvDir() {
    char tmpl[] = "/tmp/fastsock-tv-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
    env_ = std::make_unique<ScopedEnv>("TV_DIR", path_);
  }
  ~TvDir() {
    env_.reset();
    // Socket files of listeners the test closed are already gone; remove any left.
    std::string cmd = "rm -rf '" + path_ + "'";
    (void)std::system(cmd.c_str());
  }

 private:
  std::string path_;
  std::unique_ptr<ScopedEnv> env_;
};

sockaddr_in v4(uint32_t host_order_addr, uint16_t port) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(host_order_addr);
  in.sin_port = htons(port);
  return in;
}

// bind() and connect() through the library, with the profile's address translation.
int vendor_bind(const Lib& lib, const Profile& p, int fd, const sockaddr_in& tcp) {
  sockaddr_storage ss;
  socklen_t len;
  const int rc = translate_address(p, reinterpret_cast<const sockaddr*>(&tcp), sizeof tcp, ss, len);
  if (rc < 0) return rc;
  return lib.api.bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : -errno;
}
int vendor_connect(const Lib& lib, const Profile& p, int fd, const sockaddr_in& tcp) {
  sockaddr_storage ss;
  socklen_t len;
  const int rc = translate_address(p, reinterpret_cast<const sockaddr*>(&tcp), sizeof tcp, ss, len);
  if (rc < 0) return rc;
  return lib.api.connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : -errno;
}

// A listener on 0.0.0.0:port and a client connected to 127.0.0.1:port, through `lib`.
struct Pair {
  const Lib& lib;
  int listener = -1, client = -1, server = -1;

  Pair(const Lib& l, const Profile& p, uint16_t port) : lib(l) {
    listener = lib.api.socket(socket_domain(p, AF_INET), SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    REQUIRE(vendor_bind(lib, p, listener, v4(INADDR_ANY, port)) == 0);
    REQUIRE(lib.api.listen(listener, 4) == 0);
    client = lib.api.socket(socket_domain(p, AF_INET), SOCK_STREAM, 0);
    REQUIRE(client >= 0);
    REQUIRE(vendor_connect(lib, p, client, v4(INADDR_LOOPBACK, port)) == 0);
    server = lib.api.accept(listener, nullptr, nullptr);
    REQUIRE(server >= 0);
  }
  ~Pair() {
    for (int fd : {server, client, listener})
      if (fd >= 0) lib.api.close(fd);
  }
};

// Waits (bounded: a broken library must fail the test, not hang it) for `events` on fd.
short wait_for(const Lib& lib, int fd, short events) {
  pollfd pfd{fd, events, 0};
  const int n = lib.api.poll(&pfd, 1, 5000);
  REQUIRE(n == 1);
  return pfd.revents;
}

}  // namespace

TEST_CASE("load: every entry point of the test library resolves", "[vendor][lib]") {
  const Profile p = tv_profile();
  const Lib lib = load(p);
  INFO(lib.reason);
  REQUIRE(lib.ok);
  CHECK(lib.reason[0] == '\0');
  CHECK(std::string(lib.library) == env_or_fail("TV_LIB"));
  CHECK(lib.present == kAllEntries);
  for (int i = 0; i < kEntryCount; ++i) CHECK(lib.has(Entry(i)));
  // The members really are the library's symbols.
  void* handle = dlopen(env_or_fail("TV_LIB").c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  CHECK(reinterpret_cast<void*>(lib.api.connect) == dlsym(handle, "tvconnect"));
  CHECK(reinterpret_cast<void*>(lib.api.fcntl) == dlsym(handle, "tvfcntl"));
  dlclose(handle);
}

TEST_CASE("load: a missing library is reported, never fatal", "[vendor][lib]") {
  Profile p = tv_profile();
  p.libraries = {"/nonexistent/libnope.so"};
  Lib lib = load(p);
  CHECK_FALSE(lib.ok);
  CHECK(std::string(lib.reason) == "/nonexistent/libnope.so is not installed");
  CHECK(lib.api.socket == nullptr);

  p.libraries = {"/nonexistent/a.so", "libfastsock-no-such-library.so.9"};
  lib = load(p);
  CHECK_FALSE(lib.ok);
  CHECK(std::string(lib.reason) ==
        "none of /nonexistent/a.so, libfastsock-no-such-library.so.9 is installed");

  // The first library that loads completely wins.
  p.libraries = {"/nonexistent/a.so", env_or_fail("TV_LIB")};
  lib = load(p);
  CHECK(lib.ok);
  CHECK(std::string(lib.library) == env_or_fail("TV_LIB"));
}

TEST_CASE("load: a file that is not a library is reported with dlopen's reason",
          "[vendor][lib]") {
  char path[] = "/tmp/fastsock-notalib-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "not an ELF file\n", 16) == 16);
  ::close(fd);
  Profile p = tv_profile();
  p.libraries = {path};
  const Lib lib = load(p);
  ::unlink(path);
  CHECK_FALSE(lib.ok);
  const std::string reason = lib.reason;
  CHECK(reason.rfind(std::string(path) + " cannot be loaded: ", 0) == 0);
}

TEST_CASE("load: a library lacking a symbol names the symbol", "[vendor][lib]") {
  const std::string nopoll = env_or_fail("TV_NOPOLL_LIB");
  // readiness=poll (the default) needs tvpoll.
  Profile p = profile_from_rules("vendor tvn library=" + nopoll + " names=prefix:tv");
  Lib lib = load(p);
  CHECK_FALSE(lib.ok);
  CHECK(std::string(lib.reason) == nopoll + " lacks tvpoll");

  // With kernel-fd readiness poll is not required, but a profile must still declare it absent.
  p = profile_from_rules("vendor tvn library=" + nopoll + " names=prefix:tv readiness=fd");
  lib = load(p);
  CHECK_FALSE(lib.ok);
  CHECK(std::string(lib.reason) ==
        nopoll + " lacks tvpoll (not declared optional in profile 'tvn')");

  p = profile_from_rules("vendor tvn library=" + nopoll +
                         " names=prefix:tv readiness=fd optional=poll");
  lib = load(p);
  CHECK(lib.ok);
  CHECK_FALSE(lib.has(Entry::poll));
  CHECK(lib.api.poll == nullptr);
  CHECK(lib.has(Entry::recv));

  // A wrong prefix: the first required entry is the one named.
  p = profile_from_rules("vendor tvn library=" + env_or_fail("TV_LIB") + " names=prefix:xx");
  lib = load(p);
  CHECK_FALSE(lib.ok);
  CHECK(std::string(lib.reason) == env_or_fail("TV_LIB") + " lacks xxsocket");

  // When several libraries fail, the most telling reason is kept: a library that loaded
  // but lacks a symbol, over one that is not there.
  p = profile_from_rules("vendor tvn library=" + nopoll + ",/nonexistent/x.so names=prefix:tv");
  lib = load(p);
  CHECK_FALSE(lib.ok);
  CHECK(std::string(lib.reason) == nopoll + " lacks tvpoll");
}

TEST_CASE("load: the built-in profiles on this host", "[vendor][lib][builtin]") {
  for (const Profile& p : builtin_profiles()) {
    INFO(p.name);
    const Lib lib = load(p);
    if (lib.ok) {
      // Loaded: then every entry the profile needs is there.
      CHECK((lib.present & required_entries(p)) == required_entries(p));
      CHECK(lib.reason[0] == '\0');
    } else {
      CHECK(lib.reason[0] != '\0');
    }
  }

  // sockets-mx is libc's own calls with AF_MYRI (27): a kernel without Myricom's module
  // refuses the family, which is how the link learns it is absent.
  for (const Profile& p : builtin_profiles()) {
    if (p.name != "sockets-mx") continue;
    const Lib lib = load(p);
    if (asan_in_process()) {
      CHECK_FALSE(lib.ok);
      CHECK(std::string(lib.reason).find("AddressSanitizer") != std::string::npos);
      continue;
    }
    REQUIRE(lib.ok);
    errno = 0;
    const int fd = lib.api.socket(socket_domain(p, AF_INET), SOCK_STREAM, 0);
    if (fd >= 0) lib.api.close(fd);
    CHECK(fd < 0);
    CHECK(errno == EAFNOSUPPORT);
  }

  // supersockets: not installed here (or, under ASan, refused before dlopen).
  for (const Profile& p : builtin_profiles()) {
    if (p.name != "supersockets") continue;
    const Lib lib = load(p);
    CHECK_FALSE(lib.ok);
    const std::string reason = lib.reason;
    CHECK((reason == "libksupersockets.so is not installed" ||
           reason.find("AddressSanitizer") != std::string::npos));
  }
}

TEST_CASE("probe_profile: the needed path first, then the library, then one socket",
          "[vendor][probe]") {
  TvDir dir;
  char why[224] = {};
  {
    LazyLib lazy(tv_profile());
    CHECK(probe_profile(lazy.profile(), lazy, why, sizeof why));
  }
  {  // a device directory that is missing, or empty: the library is not even loaded
    char empty[] = "/tmp/fastsock-needs-XXXXXX";
    REQUIRE(::mkdtemp(empty) != nullptr);
    for (const std::string& needs : {std::string(empty) + "/absent", std::string(empty)}) {
      INFO(needs);
      LazyLib lazy(profile_from_rules("vendor tv library=/nonexistent/libtv.so names=prefix:tv needs=" + needs));
      CHECK_FALSE(probe_profile(lazy.profile(), lazy, why, sizeof why));
      CHECK(std::string(why) == "no device (" + needs + " is missing or empty)");
    }
    ::rmdir(empty);
  }
  {  // the path is there: the library's own reason
    LazyLib lazy(profile_from_rules("vendor tv library=/nonexistent/libtv.so names=prefix:tv needs=/tmp"));
    CHECK_FALSE(probe_profile(lazy.profile(), lazy, why, sizeof why));
    CHECK(std::string(why) == "/nonexistent/libtv.so is not installed");
  }
  {  // loads, but its socket() fails: unusable
    ScopedEnv fail("TV_FAIL_SOCKET", "1");
    LazyLib lazy(tv_profile());
    CHECK_FALSE(probe_profile(lazy.profile(), lazy, why, sizeof why));
    CHECK(std::string(why) == "socket(2) failed (Network is down)");
  }
  for (const Profile& p : builtin_profiles()) {
    if (p.name != "sockets-mx" || asan_in_process()) continue;
    LazyLib lazy(p);  // libc loads; AF_MYRI does not exist on this kernel
    CHECK_FALSE(probe_profile(p, lazy, why, sizeof why));
    CHECK(std::string(why) == "socket(27) failed (Address family not supported by protocol)");
  }
}

TEST_CASE("LazyLib loads once", "[vendor][lib]") {
  LazyLib lazy(tv_profile());
  const Lib& a = lazy.get();
  const Lib& b = lazy.get();
  CHECK(&a == &b);
  CHECK(a.ok);
  CHECK(lazy.profile().name == "tv");
}

TEST_CASE("round trip through the test library's entry points", "[vendor][lib][io]") {
  TvDir dir;
  const Profile p = tv_profile();
  const Lib lib = load(p);
  REQUIRE(lib.ok);
  Pair pair(lib, p, 7001);

  // send / poll / recv
  REQUIRE(lib.api.send(pair.client, "hello", 5, 0) == 5);
  CHECK((wait_for(lib, pair.server, POLLIN) & POLLIN));
  char buf[64] = {};
  REQUIRE(lib.api.recv(pair.server, buf, sizeof buf, 0) == 5);
  CHECK(std::string(buf, 5) == "hello");

  // sendmsg / recvmsg with two pieces each way
  char a[] = "ab", b[] = "cde";
  iovec out_iov[2] = {{a, 2}, {b, 3}};
  msghdr out{};
  out.msg_iov = out_iov;
  out.msg_iovlen = 2;
  REQUIRE(lib.api.sendmsg(pair.server, &out, 0) == 5);
  char x[3] = {}, y[8] = {};
  iovec in_iov[2] = {{x, 3}, {y, sizeof y}};
  msghdr in{};
  in.msg_iov = in_iov;
  in.msg_iovlen = 2;
  CHECK((wait_for(lib, pair.client, POLLIN) & POLLIN));
  REQUIRE(lib.api.recvmsg(pair.client, &in, 0) == 5);
  CHECK(std::string(x, 3) == "abc");
  CHECK(std::string(y, 2) == "de");

  // options and flags through the library
  const int one = 1;
  CHECK(lib.api.setsockopt(pair.client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
  int err = -1;
  socklen_t len = sizeof err;
  CHECK(lib.api.getsockopt(pair.client, SOL_SOCKET, SO_ERROR, &err, &len) == 0);
  CHECK(err == 0);
  const int flags = lib.api.fcntl(pair.server, F_GETFL);
  REQUIRE(flags >= 0);
  REQUIRE(lib.api.fcntl(pair.server, F_SETFL, flags | O_NONBLOCK) == 0);
  CHECK(lib.api.recv(pair.server, buf, sizeof buf, 0) == -1);
  CHECK(errno == EAGAIN);
  CHECK((wait_for(lib, pair.client, POLLOUT) & POLLOUT));

  // half-close: the peer reads end of stream
  REQUIRE(lib.api.shutdown(pair.client, SHUT_WR) == 0);
  CHECK((wait_for(lib, pair.server, POLLIN) & POLLIN));
  CHECK(lib.api.recv(pair.server, buf, sizeof buf, 0) == 0);

  // close: the library's calls refuse the descriptor afterwards
  REQUIRE(lib.api.close(pair.server) == 0);
  CHECK(lib.api.send(pair.server, "x", 1, 0) == -1);
  CHECK(errno == EBADF);
  pair.server = -1;
}

TEST_CASE("address translation reaches the library: a port offset", "[vendor][lib][io]") {
  TvDir dir;
  const Profile p = tv_profile("port-offset=1000");
  const Lib lib = load(p);
  REQUIRE(lib.ok);
  Pair pair(lib, p, 7002);  // the library's socket is on 8002
  REQUIRE(lib.api.send(pair.client, "z", 1, 0) == 1);
  char c = 0;
  CHECK((wait_for(lib, pair.server, POLLIN) & POLLIN));
  CHECK(lib.api.recv(pair.server, &c, 1, 0) == 1);
  CHECK(c == 'z');

  // Without the offset, the port the TCP listener has is not the library's.
  const int fd = lib.api.socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const sockaddr_in untranslated = v4(INADDR_LOOPBACK, 7002);
  CHECK(lib.api.connect(fd, reinterpret_cast<const sockaddr*>(&untranslated),
                        sizeof untranslated) == -1);
  CHECK(errno == ECONNREFUSED);
  lib.api.close(fd);
}

TEST_CASE("fault injection: failing socket, failing connect", "[vendor][lib][fault]") {
  TvDir dir;
  const Profile p = tv_profile();
  const Lib lib = load(p);
  REQUIRE(lib.ok);
  {
    ScopedEnv fault("TV_FAIL_SOCKET", "1");
    errno = 0;
    CHECK(lib.api.socket(AF_INET, SOCK_STREAM, 0) == -1);
    CHECK(errno == ENETDOWN);
  }
  const int listener = lib.api.socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  REQUIRE(vendor_bind(lib, p, listener, v4(INADDR_LOOPBACK, 7003)) == 0);
  REQUIRE(lib.api.listen(listener, 1) == 0);
  const int client = lib.api.socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(client >= 0);
  {
    ScopedEnv fault("TV_FAIL_CONNECT", "1");
    CHECK(vendor_connect(lib, p, client, v4(INADDR_LOOPBACK, 7003)) == -ECONNREFUSED);
  }
  // Nobody listening at all is the same answer, at once.
  CHECK(vendor_connect(lib, p, client, v4(INADDR_LOOPBACK, 7999)) == -ECONNREFUSED);
  lib.api.close(client);
  lib.api.close(listener);
}

TEST_CASE("fault injection: a connection dropped after N bytes", "[vendor][lib][fault]") {
  TvDir dir;
  const Profile p = tv_profile();
  const Lib lib = load(p);
  REQUIRE(lib.ok);
  Pair pair(lib, p, 7004);
  ScopedEnv fault("TV_DROP_AFTER", "5");

  CHECK(lib.api.send(pair.client, "0123456789", 10, 0) == 5);  // up to the drop
  CHECK(lib.api.send(pair.client, "x", 1, 0) == -1);
  CHECK(errno == ECONNRESET);

  // The peer gets exactly the bytes sent before the drop, then end of stream.
  std::string got;
  char buf[16];
  for (;;) {
    wait_for(lib, pair.server, POLLIN);
    const ssize_t n = lib.api.recv(pair.server, buf, sizeof buf, 0);
    REQUIRE(n >= 0);
    if (n == 0) break;
    got.append(buf, size_t(n));
  }
  CHECK(got == "01234");
}
