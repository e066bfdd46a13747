// LD_PRELOAD composition for `fastsock run` (tools/fastsock/library_path.hpp).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "library_path.hpp"

using fastsock::tool::compose_ld_preload;

namespace {
// A real file (so that realpath() resolves) named like the library.
std::string lib() {
  const char* path = std::getenv("FASTSOCK_LIB");
  REQUIRE(path != nullptr);
  char* real = ::realpath(path, nullptr);
  REQUIRE(real != nullptr);
  std::string out = real;
  std::free(real);
  return out;
}
}  // namespace

TEST_CASE("the library alone when nothing is preloaded", "[tool][ld_preload]") {
  CHECK(compose_ld_preload("", lib()) == lib());
  CHECK(compose_ld_preload(" : :", lib()) == lib());
}

TEST_CASE("existing entries stay first, in order", "[tool][ld_preload]") {
  CHECK(compose_ld_preload("/usr/lib/libasan.so.8", lib()) == "/usr/lib/libasan.so.8:" + lib());
  // ld.so accepts spaces as separators too; the result uses ':'.
  CHECK(compose_ld_preload("a.so b.so:c.so", lib()) == "a.so:b.so:c.so:" + lib());
}

TEST_CASE("the library is not added twice", "[tool][ld_preload]") {
  std::string replaced;
  CHECK(compose_ld_preload("asan.so:" + lib() + ":x.so", lib(), &replaced) ==
        "asan.so:" + lib() + ":x.so");
  CHECK(replaced.empty());
  CHECK(compose_ld_preload(lib() + ":" + lib(), lib()) == lib());
}

TEST_CASE("the same library through another path counts as present", "[tool][ld_preload]") {
  std::string dir = lib().substr(0, lib().rfind('/'));
  std::string indirect = dir + "/./libfastsock.so";
  std::string replaced;
  CHECK(compose_ld_preload(indirect, lib(), &replaced) == indirect);
  CHECK(replaced.empty());
}

TEST_CASE("another fastsock library is replaced, and reported", "[tool][ld_preload]") {
  std::string replaced;
  CHECK(compose_ld_preload("a.so:/old/libfastsock.so.0:b.so", lib(), &replaced) ==
        "a.so:b.so:" + lib());
  CHECK(replaced == "/old/libfastsock.so.0");
  // Names that merely start alike are someone else's library.
  CHECK(compose_ld_preload("/x/libfastsockets.so", lib()) == "/x/libfastsockets.so:" + lib());
}
