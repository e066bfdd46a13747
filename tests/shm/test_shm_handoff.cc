// Handoff with pointer passing: memcpy in one process, process_vm_readv across processes,
// partial reads, peek, cancel, refusal with the ring as fallback (nothing lost or
// duplicated), and every inconsistent descriptor or reply (shm/shm_handoff.hpp).
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "shm_handoff.hpp"
#include "shm_ring.hpp"
#include "shm_test_util.hpp"

using namespace fastsock::shm;
using shm_test::iov_of;
using shm_test::pattern;
using shm_test::pattern_bytes;

namespace {

// Both ends of direction 0 on one segment object (one process).
struct Dir0 {
  Segment seg;
  RingProducer ring_out;
  RingConsumer ring_in;
  HandoffSender tx;
  HandoffReceiver rx;
  explicit Dir0(bool same_process) {
    REQUIRE(seg.create(Limits{}).ok());
    seg.set_peer_in_this_process(same_process);
    ring_out = RingProducer(seg, 0);
    ring_in = RingConsumer(seg, 0);
    tx = HandoffSender(seg, 0);
    rx = HandoffReceiver(seg, 0);
  }
  size_t put(uint64_t from, size_t n) {
    auto v = pattern_bytes(from, n);
    iovec io = iov_of(v.data(), n);
    return ring_out.write(&io, 1, n);
  }
  std::vector<unsigned char> take(size_t max, bool peek = false) {
    std::vector<unsigned char> v(max);
    iovec io = iov_of(v.data(), max);
    v.resize(rx.read(ring_in, &io, 1, max, peek));
    return v;
  }
};

// Reads everything available in chunks of at most `chunk`, checking the pattern from `from`.
uint64_t drain_checked(Dir0& d, uint64_t from, size_t chunk) {
  for (;;) {
    auto v = d.take(chunk);
    if (v.empty()) return from;
    REQUIRE(v == pattern_bytes(from, v.size()));
    from += v.size();
  }
}

}  // namespace

TEST_CASE("handoff in one process: ring bytes, then the buffer in partial reads, then the ring") {
  for (bool same : {true, false}) {  // memcpy, then process_vm_readv on our own pid
    INFO("peer_in_this_process " << same);
    Dir0 d(same);
    REQUIRE(d.put(0, 100) == 100);
    auto big = pattern_bytes(100, 1 << 20);
    REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
    CHECK_FALSE(d.tx.post(d.ring_out, big.data(), 10));  // one at a time
    CHECK(d.rx.readable(d.ring_in) == 100 + big.size());
    CHECK_FALSE(d.tx.done());
    // A peek across the boundary sees both, and takes nothing.
    CHECK(d.take(300, true) == pattern_bytes(0, 300));
    CHECK(d.rx.readable(d.ring_in) == 100 + big.size());
    CHECK(d.take(150) == pattern_bytes(0, 150));  // 100 ring + 50 handoff bytes
    CHECK(d.ring_in.consumed() == 150);
    uint64_t got = drain_checked(d, 150, 70001);
    CHECK(got == 100 + big.size());
    CHECK(d.tx.done());
    CHECK(d.tx.finish() == big.size());
    CHECK_FALSE(d.tx.outstanding());
    CHECK(d.ring_in.consumed() == got);
    CHECK(d.ring_in.head() == 100);  // the handoff bytes never went through the ring
    // The stream goes on in the ring after the handoff.
    REQUIRE(d.put(got, 500) == 500);
    CHECK(drain_checked(d, got, 4096) == got + 500);
    CHECK_FALSE(d.ring_in.corrupt());
    CHECK_FALSE(d.tx.corrupt());
    CHECK_FALSE(d.rx.refused());
  }
}

TEST_CASE("a receiver set up after the post still reads it") {
  Dir0 d(false);
  auto big = pattern_bytes(0, 20000);
  REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
  HandoffReceiver late(d.seg, 0);
  std::vector<unsigned char> got(30000);
  iovec io = iov_of(got.data(), got.size());
  REQUIRE(late.read(d.ring_in, &io, 1, got.size(), false) == big.size());
  got.resize(big.size());
  CHECK(got == big);
  CHECK(d.tx.done());
  CHECK(d.tx.finish() == big.size());
  // And one set up after that post finished ignores it.
  HandoffReceiver later(d.seg, 0);
  CHECK(later.read(d.ring_in, &io, 1, got.size(), false) == 0);
  CHECK_FALSE(d.ring_in.corrupt());
}

TEST_CASE("handoff scatters into an iovec array") {
  Dir0 d(true);
  auto big = pattern_bytes(0, 10000);
  REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
  std::vector<unsigned char> a(3), b(7000), c(5000);
  iovec io[4] = {iov_of(a.data(), 3), iov_of(nullptr, 0), iov_of(b.data(), 7000), iov_of(c.data(), 5000)};
  CHECK(d.rx.read(d.ring_in, io, 4, 20000, false) == 10000);
  std::vector<unsigned char> joined(a);
  joined.insert(joined.end(), b.begin(), b.end());
  joined.insert(joined.end(), c.begin(), c.begin() + 2997);
  CHECK(joined == big);
  CHECK(d.tx.finish() == 10000);
}

TEST_CASE("cancel: the bytes taken count, the rest goes by the ring, nothing twice") {
  for (bool same : {true, false}) {
    INFO("peer_in_this_process " << same);
    Dir0 d(same);
    auto big = pattern_bytes(0, 50000);
    REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
    CHECK(d.take(12345) == pattern_bytes(0, 12345));
    size_t taken = d.tx.finish();  // not done: cancels
    CHECK(taken == 12345);
    CHECK(d.take(100).empty());  // the consumer sees the cancel, no more handoff bytes
    REQUIRE(d.put(taken, 5000) == 5000);
    CHECK(drain_checked(d, taken, 999) == taken + 5000);
    // Cancel before anything was read: the next post works.
    REQUIRE(d.tx.post(d.ring_out, big.data(), 10));
    CHECK(d.tx.finish() == 0);
    REQUIRE(d.tx.post(d.ring_out, big.data() + 10, 10));
    CHECK(d.take(100) == std::vector<unsigned char>(big.begin() + 10, big.begin() + 20));
    CHECK(d.tx.finish() == 10);
    CHECK_FALSE(d.ring_in.corrupt());
  }
}

TEST_CASE("a handoff that cannot be read is refused and the ring carries it instead") {
  Dir0 d(false);
  REQUIRE(d.put(0, 10) == 10);
  auto big = pattern_bytes(10, 30000);
  REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
  // Point the descriptor at a process that no longer exists (ESRCH), as if attaching to it
  // were not allowed: the receiver cannot read it either way.
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  REQUIRE(shm_test::wait_child(gone) == 0);
  d.seg.layout()->dir[0].handoff.pid.store(gone);
  CHECK(d.take(1000) == pattern_bytes(0, 10));
  CHECK(d.rx.refused());
  CHECK(d.rx.last_error() == ESRCH);
  CHECK(d.tx.done());
  size_t taken = d.tx.finish();
  CHECK(taken == 0);
  CHECK(d.tx.refused());
  CHECK_FALSE(d.tx.post(d.ring_out, big.data(), big.size()));  // never again
  uint64_t at = 10 + taken;
  size_t off = taken;
  while (off < big.size()) {
    size_t k = d.put(at, std::min<size_t>(big.size() - off, 4000));
    REQUIRE(k > 0);
    at += k;
    off += k;
    drain_checked(d, at - k, 4096);
  }
  CHECK(d.ring_in.consumed() == 10 + big.size());
  CHECK_FALSE(d.ring_in.corrupt());
}

TEST_CASE("across processes: process_vm_readv, and refusal by ptrace policy falls back to the ring") {
  constexpr size_t kMessages = 40;
  constexpr size_t kBig = 3 << 20;
  // A different uid cannot attach to our memory: the consumer child switches to `nobody`
  // when we are root (dropping CAP_SYS_PTRACE), and we stop being dumpable.
  const bool provoke_eperm = GENERATE(false, true);
  INFO("provoke EPERM " << provoke_eperm);
  if (provoke_eperm && geteuid() != 0) {
    WARN("not root: cannot switch the consumer to another uid, EPERM variant not run");
    return;
  }
  Segment seg;
  REQUIRE(seg.create(Limits{}).ok());
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (provoke_eperm && setresuid(65534, 65534, 65534) != 0) _exit(20);
    RingConsumer in(seg, 0);
    HandoffReceiver rx(seg, 0);
    std::vector<unsigned char> buf(1 << 20);
    uint64_t got = 0;
    const uint64_t total = kMessages * (kBig + 1000);
    while (got < total) {
      iovec io = iov_of(buf.data(), buf.size());
      size_t n = rx.read(in, &io, 1, buf.size(), false);
      if (in.corrupt()) _exit(3);
      if (n == 0) {
        sched_yield();
        continue;
      }
      for (size_t i = 0; i < n; ++i)
        if (buf[i] != pattern(got + i)) _exit(5);
      got += n;
    }
    if (provoke_eperm) _exit(rx.refused() && rx.last_error() == EPERM ? 0 : 6);
    _exit(rx.refused() ? 7 : 0);
  }
  if (provoke_eperm) prctl(PR_SET_DUMPABLE, 0);
  RingProducer out(seg, 0);
  HandoffSender tx(seg, 0);
  uint64_t sent = 0;
  size_t via_handoff = 0;
  auto ring_send = [&](const unsigned char* p, size_t n) {
    while (n) {
      iovec io = iov_of(const_cast<unsigned char*>(p), n);
      size_t k = out.write(&io, 1, n);
      REQUIRE_FALSE(out.corrupt());
      if (k == 0) sched_yield();
      p += k;
      n -= k;
      sent += k;
    }
  };
  for (size_t m = 0; m < kMessages; ++m) {
    auto small = pattern_bytes(sent, 1000);
    ring_send(small.data(), small.size());
    auto big = pattern_bytes(sent, kBig);
    if (tx.post(out, big.data(), big.size())) {
      while (!tx.done()) sched_yield();
      size_t taken = tx.finish();
      REQUIRE_FALSE(tx.corrupt());
      via_handoff += taken;
      sent += taken;
      ring_send(big.data() + taken, big.size() - taken);
    } else {
      ring_send(big.data(), big.size());
    }
  }
  prctl(PR_SET_DUMPABLE, 1);
  CHECK(shm_test::wait_child(pid) == 0);
  if (provoke_eperm) {
    CHECK(tx.refused());
    CHECK(via_handoff == 0);
  } else {
    CHECK_FALSE(tx.refused());
    CHECK(via_handoff == kMessages * kBig);
  }
}

TEST_CASE("across processes a large copy commits its progress chunk by chunk") {
  // The sender's patience restarts on progress (shm_conn.cc), so a reader copying a large
  // message must show progress before it is done: one process_vm_readv of the whole
  // message showed none, ran past the patience for 8 MiB, and the whole copy was thrown
  // away when the sender cancelled.
  constexpr size_t kBig = 64 << 20;
  Segment seg;
  REQUIRE(seg.create(Limits{}).ok());
  auto big = pattern_bytes(0, kBig);
  RingProducer out(seg, 0);
  HandoffSender tx(seg, 0);
  REQUIRE(tx.post(out, big.data(), big.size()));
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    RingConsumer in(seg, 0);
    HandoffReceiver rx(seg, 0);
    std::vector<unsigned char> buf(kBig);  // room for all of it in one read call
    size_t got = 0;
    while (got < kBig) {
      iovec io = iov_of(buf.data() + got, kBig - got);
      const size_t n = rx.read(in, &io, 1, kBig - got, false);
      if (in.corrupt() || rx.refused()) _exit(3);
      got += n;
    }
    _exit(buf == pattern_bytes(0, kBig) ? 0 : 5);
  }
  bool saw_partial = false;
  while (!tx.done()) {
    const uint64_t p = tx.progress();
    if (p > 0 && p < kBig) saw_partial = true;
  }
  CHECK(tx.finish() == kBig);
  CHECK_FALSE(tx.corrupt());
  CHECK(shm_test::wait_child(pid) == 0);
  CHECK(saw_partial);
}

TEST_CASE("inconsistent descriptors make the direction corrupt") {
  Dir0 d(false);
  REQUIRE(d.put(0, 100) == 100);
  CHECK(d.take(40).size() == 40);
  auto big = pattern_bytes(100, 5000);
  HandoffSlot& slot = d.seg.layout()->dir[0].handoff;
  auto post_then = [&](auto spoil) {
    REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
    spoil();
    CHECK(d.rx.readable(d.ring_in) == 0);
    CHECK(d.take(1000).empty());
    CHECK(d.ring_in.corrupt());
  };
  SECTION("zero length") { post_then([&] { slot.length.store(0); }); }
  SECTION("length above the limit") { post_then([&] { slot.length.store(kMaxHandoffLength + 1); }); }
  SECTION("address range wraps") { post_then([&] { slot.address.store(~uint64_t{0} - 10); }); }
  SECTION("position behind the consumer's head") { post_then([&] { slot.position.store(39); }); }
  SECTION("position beyond the ring's tail") { post_then([&] { slot.position.store(101); }); }
  SECTION("pid not positive") { post_then([&] { slot.pid.store(0); }); }
  SECTION("new post claiming progress") {
    post_then([&] { slot.ctl.store(handoff_ctl(HandoffState::posted, 1, 7)); });
  }
  SECTION("new post already done") {
    post_then([&] { slot.ctl.store(handoff_ctl(HandoffState::done, 1, 5000)); });
  }
  SECTION("unknown state") { post_then([&] { slot.ctl.store(handoff_ctl(HandoffState(9), 1, 0)); }); }
  SECTION("progress changed behind the consumer") {
    REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
    CHECK(d.take(100).size() == 100);  // 60 ring + 40 handoff
    slot.ctl.store(handoff_ctl(HandoffState::posted, 1, 10));
    CHECK(d.take(100).empty());
    CHECK(d.ring_in.corrupt());
  }
  SECTION("a finished post revived") {
    REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
    CHECK(drain_checked(d, 40, 100000) == 5100);
    REQUIRE(d.tx.finish() == 5000);
    slot.ctl.store(handoff_ctl(HandoffState::posted, 1, 5000));
    CHECK(d.take(100).empty());
    CHECK(d.ring_in.corrupt());
  }
}

TEST_CASE("inconsistent replies make the sender corrupt, never wait forever") {
  Dir0 d(false);
  auto big = pattern_bytes(0, 5000);
  HandoffSlot& slot = d.seg.layout()->dir[0].handoff;
  REQUIRE(d.tx.post(d.ring_out, big.data(), big.size()));
  SECTION("wrong sequence") { slot.ctl.store(handoff_ctl(HandoffState::done, 7, 5000)); }
  SECTION("progress beyond the length") { slot.ctl.store(handoff_ctl(HandoffState::posted, 1, 5001)); }
  SECTION("done short of the length") { slot.ctl.store(handoff_ctl(HandoffState::done, 1, 10)); }
  SECTION("busy from another process") { slot.ctl.store(handoff_ctl(HandoffState::busy, 1, 0)); }
  SECTION("cancelled by someone else") { slot.ctl.store(handoff_ctl(HandoffState::cancelled, 1, 0)); }
  CHECK(d.tx.done());
  CHECK(d.tx.finish() == 0);
  CHECK(d.tx.corrupt());
  CHECK_FALSE(d.tx.post(d.ring_out, big.data(), 10));
}
