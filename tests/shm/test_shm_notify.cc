// Notification: the peer's eventfd is written only when it armed the matching flag, once
// per drain; a sleeping peer is never left asleep with bytes waiting (shm/shm_notify.hpp).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <vector>

#include "shm_handoff.hpp"
#include "shm_notify.hpp"
#include "shm_ring.hpp"
#include "shm_test_util.hpp"

using namespace fastsock::shm;
using shm_test::iov_of;

namespace {

// The eventfd's counter, read without blocking (0 when nothing was signalled).
uint64_t take_count(int efd) {
  uint64_t v = 0;
  return read(efd, &v, sizeof v) == sizeof v ? v : 0;
}

struct Pair {
  Segment seg;
  int efd[2];
  Notifier n[2];
  Pair() {
    REQUIRE(seg.create(Limits{}).ok());
    efd[0] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    efd[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    REQUIRE(efd[0] >= 0);
    REQUIRE(efd[1] >= 0);
    n[0] = Notifier(seg, 0, efd[0], efd[1]);
    n[1] = Notifier(seg, 1, efd[1], efd[0]);
  }
  ~Pair() {
    close(efd[0]);
    close(efd[1]);
  }
};

}  // namespace

TEST_CASE("no signal unless the peer armed; once-armed signals exactly once") {
  Pair p;
  // Side 0 publishes data for side 1, which did not arm.
  for (int i = 0; i < 100; ++i) CHECK_FALSE(p.n[0].data_published());
  CHECK_FALSE(p.n[1].space_freed());
  CHECK(take_count(p.efd[1]) == 0);
  CHECK(take_count(p.efd[0]) == 0);
  CHECK(p.n[0].signals_sent() == 0);

  p.n[1].arm_for_data();
  CHECK_FALSE(p.n[0].space_freed());  // side 1 waits for data, not space
  CHECK(p.n[0].data_published());
  CHECK_FALSE(p.n[0].data_published());  // the once flag cleared itself
  CHECK(p.n[1].drain() == 1);
  CHECK(take_count(p.efd[1]) == 0);
  CHECK(p.n[0].signals_sent() == 1);

  // Space: side 0 waits for room in direction 0; side 1 (its consumer) frees some.
  p.n[0].arm_for_space();
  CHECK_FALSE(p.n[1].data_published());
  CHECK(p.n[1].space_freed());
  CHECK(take_count(p.efd[0]) == 1);
}

TEST_CASE("an undrained signal is not repeated; drain re-enables it") {
  Pair p;
  p.n[1].arm_for_data();
  CHECK(p.n[0].data_published());
  p.n[1].arm_for_data();                   // re-armed without draining
  CHECK_FALSE(p.n[0].data_published());    // still pending: no second write
  CHECK(p.n[1].drain() == 1);
  CHECK(p.n[1].drain() == 0);              // nothing left, and it did not block
  p.n[1].arm_for_data();
  CHECK(p.n[0].data_published());
  CHECK(p.n[1].drain() == 1);
}

TEST_CASE("hostile flag values cost at most one signal per publish") {
  Pair p;
  SideLine& s1 = p.seg.layout()->side[1];
  for (int i = 0; i < 10; ++i) {  // the peer arms with every bit before each publish
    s1.arm_data.store(0xffffffffu);
    s1.pending.store(0);
    CHECK(p.n[0].data_published());
  }
  CHECK(take_count(p.efd[1]) == 10);
  s1.pending.store(0);
  CHECK_FALSE(p.n[0].data_published());  // the signal took the arm bit; the others mean nothing
  s1.arm_data.store(0xfffffff0u);  // no arm bit: no signal
  s1.pending.store(0);
  CHECK_FALSE(p.n[0].data_published());
}

TEST_CASE("two processes ping-pong sleeping on eventfds: no lost wake-up") {
  Pair p;
  constexpr int kRounds = 20000;
  // Side 0 sends byte i and waits for side 1 to echo it; a waiting side arms, re-checks,
  // then sleeps in poll() on its eventfd.
  auto play = [&](int side) -> int {
    RingProducer out(p.seg, side);
    RingConsumer in(p.seg, 1 - side);
    Notifier& n = p.n[side];
    auto send = [&](unsigned char v) {
      iovec io = iov_of(&v, 1);
      if (out.write(&io, 1, 1) != 1) return false;
      n.data_published();
      return true;
    };
    auto receive = [&](unsigned char& v) {
      iovec io = iov_of(&v, 1);
      for (;;) {
        if (in.read(&io, 1, 1, false) == 1) return true;
        n.arm_for_data();
        if (in.read(&io, 1, 1, false) == 1) return true;
        pollfd pfd{n.fd(), POLLIN, 0};
        // 5 s: only a lost wake-up could take that long.
        if (poll(&pfd, 1, 5000) == 0) return false;
        n.drain();
      }
    };
    for (int i = 0; i < kRounds; ++i) {
      unsigned char v = static_cast<unsigned char>(i), got = 0;
      if (side == 0 && !send(v)) return 10;
      if (!receive(got)) return 11;
      if (got != v) return 12;
      if (side == 1 && !send(v)) return 10;
    }
    return in.corrupt() || out.corrupt() ? 13 : 0;
  };
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(play(1));
  CHECK(play(0) == 0);
  CHECK(shm_test::wait_child(pid) == 0);
}

TEST_CASE("two processes stream 96 MiB with handoffs, both sleeping when blocked: no lost wake-up") {
  Pair p;
  p.seg.set_peer_in_this_process(false);
  constexpr uint64_t kTotal = 96ull << 20;
  constexpr size_t kBig = 256 << 10;
  // Sleeps until `ready()` holds: arm, re-check, poll (5 s means a lost wake-up), drain.
  auto wait_until = [](Notifier& n, bool data, auto ready) {
    while (!ready()) {
      if (data) n.arm_for_data(); else n.arm_for_space();
      if (ready()) break;
      pollfd pfd{n.fd(), POLLIN, 0};
      if (poll(&pfd, 1, 5000) == 0) return false;
      n.drain();
    }
    return true;
  };
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    RingConsumer in(p.seg, 0);
    HandoffReceiver rx(p.seg, 0);
    Notifier& n = p.n[1];
    std::vector<unsigned char> buf(100000);
    uint64_t got = 0;
    while (got < kTotal) {
      iovec io = iov_of(buf.data(), buf.size());
      size_t k = 0;
      if (!wait_until(n, true, [&] { return (k = rx.read(in, &io, 1, buf.size(), false)) > 0 || in.corrupt(); }))
        _exit(11);
      if (in.corrupt()) _exit(12);
      n.space_freed();
      for (size_t i = 0; i < k; ++i)
        if (buf[i] != shm_test::pattern(got + i)) _exit(13);
      got += k;
    }
    _exit(0);
  }
  RingProducer out(p.seg, 0);
  HandoffSender tx(p.seg, 0);
  Notifier& n = p.n[0];
  uint64_t sent = 0;
  int message = 0;
  while (sent < kTotal) {
    size_t len = std::min<uint64_t>(++message % 10 == 0 ? kBig : 5000 + message % 3000, kTotal - sent);
    auto v = shm_test::pattern_bytes(sent, len);
    size_t off = 0;
    if (len == kBig && tx.post(out, v.data(), len)) {
      n.data_published();
      REQUIRE(wait_until(n, false, [&] { return tx.done(); }));
      off = tx.finish();
      REQUIRE_FALSE(tx.corrupt());
    }
    while (off < len) {
      iovec io = iov_of(v.data() + off, len - off);
      size_t k = 0;
      REQUIRE(wait_until(n, false, [&] { return (k = out.write(&io, 1, len - off)) > 0 || out.corrupt(); }));
      REQUIRE_FALSE(out.corrupt());
      n.data_published();
      off += k;
    }
    sent += len;
  }
  CHECK(shm_test::wait_child(pid) == 0);
  CHECK_FALSE(tx.refused());
}
