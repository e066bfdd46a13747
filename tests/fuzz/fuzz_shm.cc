// libFuzzer target for the shm core (shm/): the segment's bytes are attacker-controlled.
//
// One process holds both ends of direction 0 of a segment, plus the notifiers of both
// sides. The input is a program: each step either runs an operation of a legitimate end
// (write, read/peek with odd iovecs, handoff post/finish, readable, notification) or lets
// the "peer" overwrite any bytes of the shared header (counters, window, flags, handoff
// descriptor, arm words) or re-attach the segment with a scribbled header.
//
// Checked, besides ASan/UBSan:
// - no access outside the ring: the other direction's data area and the unused part of the
//   header page are ASan-poisoned, so a read or write that leaves direction 0's max_window
//   bytes is reported;
// - results within bounds: a read returns at most what was asked and the iovecs hold;
//   a window is a power of two within the limits; corrupt() is sticky;
// - while no shared byte was scribbled, the stream is exact: the consumer reads the
//   producer's bytes in order, ring and handoff alike, none lost or twice.
// Handoffs run with peer_in_this_process = false, so the receiver reads the descriptor's
// address with process_vm_readv (a hostile address fails cleanly) — the memcpy shortcut is
// only for ends known to share the process, which a hostile peer cannot be.
#include <sanitizer/asan_interface.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "shm_control.hpp"
#include "shm_handoff.hpp"
#include "shm_notify.hpp"
#include "shm_ring.hpp"
#include "shm_segment.hpp"

using namespace fastsock::shm;

namespace {

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz_shm: invariant failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

constexpr Limits kLimits{4096, 16384};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  uint64_t number(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(byte()) << (8 * i);
    return v;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

unsigned char stream_byte(uint64_t i) { return static_cast<unsigned char>((i * 131) ^ (i >> 8)); }

int g_efd[2] = {-1, -1};

struct Harness {
  Segment seg;
  RingProducer out;
  RingConsumer in;
  HandoffSender tx;
  HandoffReceiver rx;
  Notifier side0, side1;
  Control control;
  // The producer's stream so far, and the outstanding handoff's buffer.
  uint64_t produced = 0;
  uint64_t received = 0;
  std::vector<unsigned char> handoff_buf;
  bool scribbled = false;
  bool was_corrupt = false;

  bool init() {
    if (!seg.create(kLimits).ok()) return false;
    out = RingProducer(seg, 0);
    in = RingConsumer(seg, 0);
    tx = HandoffSender(seg, 0);
    rx = HandoffReceiver(seg, 0);
    side0 = Notifier(seg, 0, g_efd[0], g_efd[1]);
    side1 = Notifier(seg, 1, g_efd[1], g_efd[0]);
    control = Control(seg, 0);
    // Outside direction 0's ring, nothing may be touched through a ring pointer.
    unsigned char* base = reinterpret_cast<unsigned char*>(seg.layout());
    __asan_poison_memory_region(base + sizeof(Layout), kHeaderBytes - sizeof(Layout));
    __asan_poison_memory_region(seg.ring_data(1), kLimits.max_window);
    return true;
  }
  ~Harness() {
    if (seg.valid()) {
      unsigned char* base = reinterpret_cast<unsigned char*>(seg.layout());
      __asan_unpoison_memory_region(base + sizeof(Layout), kHeaderBytes - sizeof(Layout));
      __asan_unpoison_memory_region(seg.ring_data(1), kLimits.max_window);
    }
  }

  void write(Input& in_bytes) {
    if (tx.outstanding()) return;  // a legitimate producer waits for its handoff
    size_t n = in_bytes.number(2) % 20000;
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = stream_byte(produced + i);
    // One iovec (the direct copy) or two (the gather path).
    const bool split = n & 1;
    iovec io[2] = {{v.data(), split ? n / 3 : n}, {v.data() + n / 3, n - n / 3}};
    size_t k = out.write(io, split ? 2 : 1, n);
    FUZZ_CHECK(k <= n);
    produced += k;
    side0.data_published();
    FUZZ_CHECK(out.window() >= kMinWindow && out.window() <= kLimits.max_window);
    FUZZ_CHECK((out.window() & (out.window() - 1)) == 0);
    FUZZ_CHECK(out.writable() <= out.window());
  }

  void read(Input& in_bytes) {
    bool peek = in_bytes.byte() & 1;
    int count = in_bytes.byte() % 5;
    std::vector<std::vector<unsigned char>> bufs(count);
    std::vector<iovec> io(count);
    size_t room = 0;
    for (int i = 0; i < count; ++i) {
      bufs[i].resize(in_bytes.number(2) % 9000);
      io[i] = iovec{bufs[i].data(), bufs[i].size()};
      room += bufs[i].size();
    }
    size_t max = in_bytes.number(2);
    size_t k = rx.read(in, io.data(), count, max, peek);
    FUZZ_CHECK(k <= max && k <= room);
    if (was_corrupt) FUZZ_CHECK(k == 0 && in.corrupt());
    was_corrupt = in.corrupt();
    side1.space_freed();
    if (scribbled) return;
    FUZZ_CHECK(!in.corrupt());
    // Exact stream: what was read is the producer's next bytes.
    size_t seen = 0;
    for (int i = 0; i < count && seen < k; ++i)
      for (size_t j = 0; j < bufs[i].size() && seen < k; ++j, ++seen)
        FUZZ_CHECK(bufs[i][j] == stream_byte(received + seen));
    if (!peek) received += k;
    FUZZ_CHECK(received <= produced + handoff_buf.size());
    FUZZ_CHECK(in.consumed() == received);
  }

  void post(Input& in_bytes) {
    if (tx.outstanding()) {
      size_t taken = tx.finish();
      FUZZ_CHECK(taken <= handoff_buf.size());
      // The rest goes by the ring in a real sender; here it is simply not sent, and the
      // stream continues at produced + taken (positions are ring-relative, so skipping the
      // rest keeps the stream exact only if nothing else was posted after it).
      produced += taken;
      if (!scribbled) FUZZ_CHECK(!tx.corrupt());
      handoff_buf.clear();
      return;
    }
    size_t n = 1 + in_bytes.number(2) % 30000;
    handoff_buf.resize(n);
    for (size_t i = 0; i < n; ++i) handoff_buf[i] = stream_byte(produced + i);
    if (!tx.post(out, handoff_buf.data(), n)) handoff_buf.clear();
    side0.data_published();
  }

  // The peer writes `len` bytes at any offset of the layout (all shared state but data).
  void scribble(Input& in_bytes) {
    size_t off = in_bytes.number(2) % sizeof(Layout);
    size_t len = 1 + in_bytes.byte() % 8;
    if (off + len > sizeof(Layout)) len = sizeof(Layout) - off;
    unsigned char* base = reinterpret_cast<unsigned char*>(seg.layout());
    for (size_t i = 0; i < len; ++i) base[off + i] = in_bytes.byte();
    scribbled = true;
  }

  // The acceptor attaching this (possibly scribbled) segment: validated or refused.
  void reattach(Input& in_bytes) {
    Segment other;
    Status st = other.attach(::dup(seg.fd()), Limits{kLimits.initial_window,
                                                     in_bytes.byte() & 1 ? kLimits.max_window : 4096});
    if (!st.ok()) {
      FUZZ_CHECK(!other.valid() && st.reason != nullptr);
      return;
    }
    FUZZ_CHECK(other.limits().max_window <= kLimits.max_window);
    RingConsumer c(other, 1);  // direction 1 is idle: any state there is the peer's doing
    unsigned char buf[64];
    iovec io{buf, sizeof buf};
    FUZZ_CHECK(c.read(&io, 1, sizeof buf, true) <= sizeof buf);
  }

  void misc(Input& in_bytes) {
    switch (in_bytes.byte() % 8) {
      case 0: FUZZ_CHECK(rx.readable(in) <= (uint64_t{1} << 41)); break;
      case 1: side1.arm_for_data(); break;
      case 2: side0.arm_for_space(); break;
      case 3: side0.drain(); side1.drain(); break;
      case 4: (void)in.eof(); (void)out.read_closed(); break;
      case 5: {
        uint64_t v;
        (void)control.switch_offset(v);
        (void)control.peer_consumed(produced, v);
        (void)control.state();
        break;
      }
      case 6: (void)tx.done(); break;
      default: side0.drain_if_signalled(); side1.drain_if_signalled(); break;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (g_efd[0] < 0) {
    g_efd[0] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    g_efd[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g_efd[0] < 0 || g_efd[1] < 0) std::abort();
  }
  Harness h;
  if (!h.init()) return 0;
  Input in(data, size);
  for (int steps = 0; steps < 200 && !in.empty(); ++steps) {
    switch (in.byte() % 6) {
      case 0: h.write(in); break;
      case 1: h.read(in); break;
      case 2: h.post(in); break;
      case 3: h.scribble(in); break;
      case 4: h.reattach(in); break;
      default: h.misc(in); break;
    }
  }
  // A live handoff must be finished before its buffer goes away (as a blocking send does).
  if (h.tx.outstanding()) h.tx.finish();
  return 0;
}
