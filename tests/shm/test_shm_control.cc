// Switch and downgrade fields of a direction (shm/shm_control.hpp).
#include <catch2/catch.hpp>

#include "shm_control.hpp"
#include "shm_handoff.hpp"
#include "shm_ring.hpp"
#include "shm_test_util.hpp"

using namespace fastsock::shm;

TEST_CASE("switch offset: unset until the producer sets it, per direction") {
  Segment a, b;
  REQUIRE(a.create(Limits{}).ok());
  REQUIRE(shm_test::attach_copy(a, b).ok());
  Control tx(a, 0), rx(b, 0), other(b, 1);
  uint64_t off = 1;
  CHECK_FALSE(rx.switch_offset(off));
  tx.set_switch_offset(12345);
  CHECK(rx.switch_offset(off));
  CHECK(off == 12345);
  CHECK_FALSE(other.switch_offset(off));
  tx.set_switch_offset(0);  // switching before any TCP byte
  CHECK(rx.switch_offset(off));
  CHECK(off == 0);
}

TEST_CASE("consumed counts ring and handoff bytes; a claim beyond what was sent is refused") {
  Segment a;
  REQUIRE(a.create(Limits{}).ok());
  a.set_peer_in_this_process(true);
  RingProducer out(a, 1);
  RingConsumer in(a, 1);
  HandoffSender tx(a, 1);
  HandoffReceiver rx(a, 1);
  Control ctl(a, 1);
  auto v = shm_test::pattern_bytes(0, 3000);
  iovec io = shm_test::iov_of(v.data(), 1000);
  REQUIRE(out.write(&io, 1, 1000) == 1000);
  REQUIRE(tx.post(out, v.data() + 1000, 2000));
  std::vector<unsigned char> buf(1500);
  iovec r = shm_test::iov_of(buf.data(), buf.size());
  REQUIRE(rx.read(in, &r, 1, buf.size(), false) == 1500);
  uint64_t consumed = 0;
  CHECK(ctl.peer_consumed(3000, consumed));
  CHECK(consumed == 1500);
  CHECK_FALSE(ctl.peer_consumed(1499, consumed));
  a.layout()->dir[1].consumer.consumed.store(~uint64_t{0});
  CHECK_FALSE(ctl.peer_consumed(3000, consumed));
}

TEST_CASE("direction state: the first end to leave the ring wins; unknown values read as dead") {
  Segment a;
  REQUIRE(a.create(Limits{}).ok());
  Control c(a, 0);
  CHECK(c.state() == DirectionState::active);
  CHECK(c.request_downgrade() == DirectionState::active);  // the consumer left first
  CHECK(c.state() == DirectionState::downgrade_requested);
  CHECK(c.resume_on_tcp() == DirectionState::downgrade_requested);  // the producer learns it
  CHECK(c.state() == DirectionState::downgrade_requested);
  Control other(a, 1);
  CHECK(other.resume_on_tcp() == DirectionState::active);  // the producer left first
  CHECK(other.request_downgrade() == DirectionState::tcp_resumed);
  CHECK(other.state() == DirectionState::tcp_resumed);
  c.set_state(DirectionState::dead);
  CHECK(c.request_downgrade() == DirectionState::dead);
  a.layout()->dir[0].control.state.store(77);
  CHECK(c.state() == DirectionState::dead);
  CHECK(Control(a, 1).state() == DirectionState::tcp_resumed);
  CHECK(&c.producer_lock() == &a.layout()->dir[0].producer.lock);
  CHECK(&c.consumer_lock() == &a.layout()->dir[0].consumer.lock);
  CHECK(c.producer_lock().load() == 0);
}
