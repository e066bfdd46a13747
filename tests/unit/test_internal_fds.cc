// The library's own descriptors are spared by the application's close_range/closefrom and
// refused to its close() (src/internal_fds.hpp).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>

#include "internal_fds.hpp"

namespace fs = fastsock::internal_fds;

namespace {
bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// /dev/null at exactly `fd`.
void open_at(int fd) {
  const int tmp = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(tmp >= 0);
  REQUIRE(dup2(tmp, fd) == fd);
  close(tmp);
}
}  // namespace

// The soft limit lowered to 64 for one test case, the hard limit kept (room above it), and
// set back at the end. `room` is false where the hard limit leaves no such room.
struct SoftLimit64 {
  rlimit saved{};
  bool room = false;
  SoftLimit64() {
    REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 200) {
      WARN("hard RLIMIT_NOFILE " << saved.rlim_max << ": no room above a soft limit of 64");
      return;
    }
    rlimit low_limit = saved;
    low_limit.rlim_cur = 64;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low_limit) == 0);
    fs::forget_limits();
    room = true;
  }
  ~SoftLimit64() {
    if (!room) return;
    setrlimit(RLIMIT_NOFILE, &saved);
    fs::forget_limits();
  }
};

TEST_CASE("take: a new descriptor moves above the placement base and is counted") {
  const int base = fs::placement_base();
  REQUIRE(base > 0);
  const long before = fs::count();
  const int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(low >= 0);
  REQUIRE(low < base);
  const int fd = fs::take(low);
  CHECK(fd >= base);
  CHECK_FALSE(is_open(low));  // the number the application would have got next is free
  CHECK(fs::contains(fd));
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(fs::count() == before + 1);
  fs::add(fd);  // once only
  CHECK(fs::count() == before + 1);
  CHECK(fs::close(fd) == 0);
  CHECK(fs::count() == before);
  fs::remove(fd);  // no longer there: not counted twice
  CHECK(fs::count() == before);
  // A failed creation passes through, errno intact.
  errno = EMFILE;
  CHECK(fs::take(-1) == -1);
  CHECK(errno == EMFILE);
}

TEST_CASE("dup: the copy is made above the placement base, never at a free low number") {
  const int base = fs::placement_base();
  const long before = fs::count();
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const int free_low = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(free_low < base);
  close(free_low);  // the lowest free number: a copy made at 0 would take it
  const int copy = fs::dup(fd);
  CHECK(copy >= base);
  CHECK_FALSE(is_open(free_low));
  CHECK(fs::contains(copy));
  CHECK((fcntl(copy, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(fs::count() == before + 1);
  CHECK(fs::close(copy) == 0);
  CHECK(fs::count() == before);
  close(fd);
  errno = 0;
  CHECK(fs::dup(-1) == -1);
  CHECK(errno == EBADF);
  CHECK(fs::count() == before);
}

// In a forked child: the hard limit cannot be raised again once lowered.
TEST_CASE("take: with no room above the limit, the base follows a lowered limit") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const rlimit low_limit{64, 64};
    if (setrlimit(RLIMIT_NOFILE, &low_limit) != 0) _exit(10);
    fs::forget_limits();  // as the library's setrlimit hook does
    if (fs::room_above(fs::nofile()) != 0) _exit(11);
    const int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int fd = low >= 0 && low < 32 ? fs::take(low) : -1;
    if (fs::placement_base() != 32) _exit(12);
    if (fd < 32 || fd >= 64) _exit(13);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("dup: with room above the soft limit, the copy goes there and the limit stays") {
  SoftLimit64 limit;
  if (!limit.room) return;
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(fd < 64);
  const int copy = fs::dup(fd);
  CHECK(copy >= 64);  // past the application's limit
  CHECK(fs::contains(copy));
  rlimit now{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &now) == 0);
  CHECK(now.rlim_cur == 64);  // set back
  CHECK(fs::close(copy) == 0);
  close(fd);
}

TEST_CASE("take: with room above the soft limit, descriptors go there and the limit stays") {
  SoftLimit64 limit;
  if (!limit.room) return;
  const rlimit& saved = limit.saved;
  CHECK(fs::room_above(fs::nofile()) > 0);
  const long before = fs::count();
  int fds[3];
  for (int& fd : fds) {
    const int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(low >= 0);
    REQUIRE(low < 64);
    fd = fs::take(low);
    CHECK(fd >= 64);  // past the application's limit: none of its numbers taken
    CHECK_FALSE(is_open(low));
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  CHECK(fds[1] == fds[0] + 1);  // the lowest free numbers there
  CHECK(fs::count() == before + 3);
  rlimit now{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &now) == 0);
  CHECK(now.rlim_cur == 64);  // set back
  CHECK(now.rlim_max == saved.rlim_max);
  // The descriptors work above the limit (the kernel checks it only when it hands one out).
  char byte;
  CHECK(read(fds[0], &byte, 1) == 0);
  for (int fd : fds) CHECK(fs::close(fd) == 0);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  fs::forget_limits();
  CHECK(fs::room_above(fs::nofile()) == (saved.rlim_cur < saved.rlim_max &&
                                         saved.rlim_cur <= rlim_t(fs::kHighMaxSoft)
                                             ? std::min<long>(long(saved.rlim_max - saved.rlim_cur), fs::kHighRoom)
                                             : 0));
}

TEST_CASE("room above the limit: only for soft limits up to kHighMaxSoft, at most kHighRoom") {
  CHECK(fs::room_above({1024, 1024}) == 0);
  CHECK(fs::room_above({1024, 2048}) == 1024);
  CHECK(fs::room_above({1024, 1 << 20}) == fs::kHighRoom);
  CHECK(fs::room_above({fs::kHighMaxSoft, fs::kHighMaxSoft + 10}) == 10);
  CHECK(fs::room_above({fs::kHighMaxSoft + 1, 1 << 20}) == 0);
  CHECK(fs::room_above({0, 10}) == 0);
}

TEST_CASE("membership: add, remove, and numbers far apart") {
  CHECK_FALSE(fs::contains(-1));
  fs::add(-1);  // ignored
  for (int fd : {600, 640, 1 << 20, (1 << 18) - 1, 1 << 18}) {
    CHECK_FALSE(fs::contains(fd));
    fs::add(fd);
    CHECK(fs::contains(fd));
    CHECK_FALSE(fs::contains(fd + 1));
    fs::remove(fd);
    CHECK_FALSE(fs::contains(fd));
  }
}

TEST_CASE("close_range spares internal descriptors, across 64-bit word boundaries") {
  const int fds[] = {510, 511, 512, 575, 576, 640, 700};
  for (int fd : fds) open_at(fd);
  fs::add(511);
  fs::add(576);
  fs::add(700);  // the last of the range
  REQUIRE(fs::close_range_sparing(505, 700, 0) == 0);
  CHECK_FALSE(is_open(510));
  CHECK(is_open(511));
  CHECK_FALSE(is_open(512));
  CHECK_FALSE(is_open(575));
  CHECK(is_open(576));
  CHECK_FALSE(is_open(640));
  CHECK(is_open(700));
  // Close-on-exec is harmless to set on ours, and everything gets it.
  open_at(650);
  REQUIRE(fs::close_range_sparing(505, 700, CLOSE_RANGE_CLOEXEC) == 0);
  CHECK((fcntl(650, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(is_open(511));
  close(650);
  for (int fd : {511, 576, 700}) CHECK(fs::close(fd) == 0);
  CHECK_FALSE(fs::contains(576));
  CHECK_FALSE(is_open(576));
}

namespace {
int g_replaced_seen = -1, g_replaced_calls = 0;
void note_replaced(int fd) noexcept {
  g_replaced_seen = fd;
  ++g_replaced_calls;
}
}  // namespace

TEST_CASE("replaced: the owners are told, then the number is no longer internal") {
  fs::on_replaced(note_replaced);
  fs::on_replaced(note_replaced);  // idempotent: told once
  fs::add(777);
  fs::replaced(777);
  CHECK(g_replaced_seen == 777);
  CHECK(g_replaced_calls == 1);
  CHECK_FALSE(fs::contains(777));
}
