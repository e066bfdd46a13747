// The fd table: lookup, dup sharing, removal, ranges, and lookups racing with closes.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "fd_table.hpp"

using namespace fastsock;

namespace {
// Descriptor numbers far above anything the test process opens, so the table entries the
// tests install never describe a real descriptor of the test runner.
constexpr int kBase = 500'000;
}  // namespace

TEST_CASE("an untracked descriptor has no socket") {
  CHECK_FALSE(fd_table::lookup(kBase));
  CHECK_FALSE(fd_table::lookup(-1));
  CHECK_FALSE(fd_table::lookup(fd_table::kMaxFd));
  CHECK(fd_table::install(-5, nullptr));  // removing nothing is not an error
  SocketRef s = fd_table::make_socket();
  CHECK_FALSE(fd_table::install(fd_table::kMaxFd, s.get()));  // out of range: stays untracked
  CHECK_FALSE(fd_table::install(-1, s.get()));
}

TEST_CASE("installed sockets are found, shared by dups, and released with the last one") {
  const size_t live_before = fd_table::live_sockets();
  {
    SocketRef s = fd_table::make_socket();
    REQUIRE(s);
    s->domain = AF_INET;
    REQUIRE(fd_table::install(kBase + 1, s.get()));
    REQUIRE(fd_table::install(kBase + 2, s.get()));  // a dup shares the Socket
  }
  CHECK(fd_table::live_sockets() == live_before + 1);
  {
    SocketRef a = fd_table::lookup(kBase + 1);
    SocketRef b = fd_table::lookup(kBase + 2);
    REQUIRE(a);
    CHECK(a.get() == b.get());
    CHECK(a->domain == AF_INET);
  }
  fd_table::remove(kBase + 1);
  CHECK_FALSE(fd_table::lookup(kBase + 1));
  CHECK(fd_table::lookup(kBase + 2));
  CHECK(fd_table::live_sockets() == live_before + 1);
  fd_table::remove(kBase + 2);
  CHECK(fd_table::live_sockets() == live_before);
}

TEST_CASE("installing over a descriptor releases what it held") {
  const size_t live_before = fd_table::live_sockets();
  SocketRef first = fd_table::make_socket();
  SocketRef second = fd_table::make_socket();
  fd_table::install(kBase + 10, first.get());
  first.reset();  // now only the table holds it
  fd_table::install(kBase + 10, second.get());
  second.reset();
  CHECK(fd_table::live_sockets() == live_before + 1);
  fd_table::remove(kBase + 10);
  CHECK(fd_table::live_sockets() == live_before);
}

TEST_CASE("remove_range forgets every descriptor in the range, across chunks") {
  const size_t live_before = fd_table::live_sockets();
  const int first = kBase + fd_table::kChunkSize - 2;  // straddles a chunk boundary
  for (int fd = first; fd < first + 5; ++fd) {
    SocketRef s = fd_table::make_socket();
    fd_table::install(fd, s.get());
  }
  CHECK(fd_table::live_sockets() == live_before + 5);
  fd_table::remove_range(unsigned(first + 1), unsigned(first + 3));
  CHECK(fd_table::lookup(first));
  CHECK_FALSE(fd_table::lookup(first + 1));
  CHECK_FALSE(fd_table::lookup(first + 3));
  CHECK(fd_table::lookup(first + 4));
  fd_table::remove_range(unsigned(first), ~0u);  // closefrom()
  CHECK(fd_table::live_sockets() == live_before);
}

TEST_CASE("lookups racing with install and remove never see a recycled socket") {
  // One thread keeps replacing the socket behind a descriptor; the others look it up and
  // check that what they hold is a live socket stamped with a value only that descriptor's
  // sockets carry (a recycled one would show another stamp or a count of zero).
  constexpr int kFd = kBase + 100;
  constexpr int kOtherFd = kBase + 101;
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0};
  std::thread churn([&] {
    for (int i = 0; i < 20000; ++i) {
      SocketRef s = fd_table::make_socket();
      s->domain = 1;
      fd_table::install(kFd, s.get());
      SocketRef t = fd_table::make_socket();
      t->domain = 2;
      fd_table::install(kOtherFd, t.get());
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop) {
        SocketRef s = fd_table::lookup(kFd);
        if (s && (s->domain != 1 || s->refs.load() <= 0)) ++bad;
      }
    });
  }
  churn.join();
  for (auto& t : readers) t.join();
  CHECK(bad == 0);
  fd_table::remove(kFd);
  fd_table::remove(kOtherFd);
}
