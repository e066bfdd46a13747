// Segment creation, sealing, memory footprint and attach-time validation of every header
// field (shm/shm_segment.hpp).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "shm_layout.hpp"
#include "shm_segment.hpp"
#include "shm_test_util.hpp"

using namespace fastsock::shm;

TEST_CASE("limits are checked") {
  CHECK(validate_limits(Limits{}).ok());
  CHECK(validate_limits(Limits{4096, 4096}).ok());
  CHECK_FALSE(validate_limits(Limits{3000, 1u << 20}).ok());
  CHECK_FALSE(validate_limits(Limits{2048, 1u << 20}).ok());
  CHECK_FALSE(validate_limits(Limits{1u << 20, 1u << 14}).ok());
  CHECK_FALSE(validate_limits(Limits{4096, 128u << 20}).ok());
  Segment s;
  Status st = s.create(Limits{4096, 12288});
  CHECK_FALSE(st.ok());
  CHECK(std::string(st.reason) == "ring windows must be powers of two");
  CHECK_FALSE(s.valid());
}

TEST_CASE("create then attach sees one segment with the creator's limits") {
  Segment a;
  REQUIRE(a.create(Limits{16384, 1u << 20}).ok());
  CHECK(a.size() == 4096 + 2 * (1u << 20));
  const Layout* l = a.layout();
  CHECK(l->header.magic == kMagic);
  CHECK(l->header.version == kVersion);
  CHECK(l->dir[0].producer.geometry.load() == encode_geometry(16384, 16384, 0));
  CHECK(l->dir[1].producer.switch_offset.load() == kNoSwitchOffset);

  Segment b;
  Status st = shm_test::attach_copy(a, b);
  INFO(st.reason);
  REQUIRE(st.ok());
  CHECK(b.limits().initial_window == 16384);
  CHECK(b.limits().max_window == (1u << 20));
  a.ring_data(1)[5] = 42;
  CHECK(b.ring_data(1)[5] == 42);
  CHECK(b.ring_data(1) - b.ring_data(0) == (1 << 20));
  // Close the memfds early: the mappings stay.
  a.close_fd();
  b.close_fd();
  CHECK(a.fd() == -1);
  b.ring_data(0)[0] = 7;
  CHECK(a.ring_data(0)[0] == 7);
}

TEST_CASE("the memfd is sealed: the peer cannot shrink or grow it") {
  Segment a;
  REQUIRE(a.create(Limits{}).ok());
  CHECK(ftruncate(a.fd(), 4096) == -1);
  CHECK(errno == EPERM);
  CHECK(ftruncate(a.fd(), a.size() * 2) == -1);
  int seals = fcntl(a.fd(), F_GET_SEALS);
  CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  CHECK((fcntl(a.fd(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("an idle segment occupies the header page and two initial windows") {
  Segment a;
  REQUIRE(a.create(Limits{16384, 1u << 20}).ok());
  struct stat st;
  REQUIRE(fstat(a.fd(), &st) == 0);
  // st_blocks counts 512-byte units actually allocated in the sparse memfd.
  CHECK(uint64_t(st.st_blocks) * 512 == 4096 + 2 * 16384);
  CHECK(uint64_t(st.st_blocks) * 512 <= 64 * 1024);
  CHECK(uint64_t(st.st_size) == 4096 + 2 * (1u << 20));
}

namespace {

// Creates a good segment, lets `spoil` change its header, and attaches a copy.
template <typename F>
std::string attach_after(F spoil, const Limits& acceptable = Limits{}) {
  Segment a;
  REQUIRE(a.create(Limits{}).ok());
  spoil(a.layout()->header);
  Segment b;
  Status st = shm_test::attach_copy(a, b, acceptable);
  CHECK(st.ok() == b.valid());
  return st.ok() ? "ok" : st.reason;
}

}  // namespace

TEST_CASE("attach rejects a segment with any bad header field") {
  CHECK(attach_after([](SegmentHeader&) {}) == "ok");
  CHECK(attach_after([](SegmentHeader& h) { h.magic ^= 1; }) == "bad segment magic");
  CHECK(attach_after([](SegmentHeader& h) { h.version = kVersion + 1; }) == "unsupported segment version");
  CHECK(attach_after([](SegmentHeader& h) { h.header_bytes = 8192; }) == "bad segment header size");
  CHECK(attach_after([](SegmentHeader& h) { h.max_window = 3u << 18; }) ==
        "segment maximum window invalid or above the accepted limit");
  CHECK(attach_after([](SegmentHeader& h) { h.max_window = 2048; }) ==
        "segment maximum window invalid or above the accepted limit");
  CHECK(attach_after([](SegmentHeader& h) { h.max_window = 1u << 19; }) ==
        "segment size does not match its header");
  CHECK(attach_after([](SegmentHeader& h) { h.initial_window = 2u << 20; }) ==
        "segment initial window invalid");
  CHECK(attach_after([](SegmentHeader& h) { h.initial_window = 5000; }) ==
        "segment initial window invalid");
  CHECK(attach_after([](SegmentHeader& h) { h.initial_window = 1024; }) ==
        "segment initial window invalid");
  CHECK(attach_after([](SegmentHeader& h) { h.segment_bytes += 4096; }) ==
        "segment size does not match its header");
  CHECK(attach_after([](SegmentHeader& h) { h.ring_offset[0] = 0; }) == "segment ring offsets invalid");
  CHECK(attach_after([](SegmentHeader& h) { h.ring_offset[1] = 4096; }) ==
        "segment ring offsets invalid");
  // The acceptor's own cap on memory: a 1 MiB window is refused by one that accepts 256 KiB.
  CHECK(attach_after([](SegmentHeader&) {}, Limits{16384, 256u << 10}) == "segment size out of range");
}

TEST_CASE("attach rejects unsealed, wrongly sized and non-file descriptors") {
  Segment b;
  CHECK(b.attach(-1).reason == std::string("no segment descriptor"));

  int fds[2];
  REQUIRE(pipe(fds) == 0);
  CHECK(b.attach(fds[0]).reason == std::string("segment is not a regular file"));  // fd taken
  close(fds[1]);

  // A good header in a memfd that is not sealed: the peer could shrink it under us.
  Segment good;
  REQUIRE(good.create(Limits{}).ok());
  int raw = memfd_create("unsealed", MFD_CLOEXEC);
  REQUIRE(raw >= 0);
  REQUIRE(ftruncate(raw, off_t(good.size())) == 0);
  REQUIRE(pwrite(raw, good.layout(), sizeof(Layout), 0) == ssize_t(sizeof(Layout)));
  CHECK(b.attach(raw).reason == std::string("segment is not sealed against resizing"));

  // A file in /dev/shm (size-limited tmpfs) cannot carry the seals at all.
  char name[64];
  snprintf(name, sizeof name, "/dev/shm/fastsock-test-seg.%d", int(getpid()));
  int shmfile = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (shmfile >= 0) {
    unlink(name);
    REQUIRE(ftruncate(shmfile, off_t(good.size())) == 0);
    REQUIRE(pwrite(shmfile, good.layout(), sizeof(Layout), 0) == ssize_t(sizeof(Layout)));
    CHECK(fcntl(shmfile, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == -1);
    CHECK(b.attach(shmfile).reason == std::string("segment is not sealed against resizing"));
  }

  int tiny = memfd_create("tiny", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(tiny >= 0);
  REQUIRE(ftruncate(tiny, 4096) == 0);
  CHECK(b.attach(tiny).reason == std::string("segment size out of range"));

  // Sealed, right size, but all zeros.
  int zero = memfd_create("zero", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(zero >= 0);
  REQUIRE(ftruncate(zero, off_t(good.size())) == 0);
  REQUIRE(fcntl(zero, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  CHECK(b.attach(zero).reason == std::string("bad segment magic"));
  CHECK_FALSE(b.valid());
}

TEST_CASE("segments move without double unmapping") {
  Segment a;
  REQUIRE(a.create(Limits{}).ok());
  Layout* l = a.layout();
  Segment b(std::move(a));
  CHECK_FALSE(a.valid());
  CHECK(b.layout() == l);
  Segment c;
  c = std::move(b);
  CHECK(c.layout() == l);
  CHECK(c.layout()->header.magic == kMagic);
}
