// libFuzzer target for the shm rendezvous messages (shm/shm_rendezvous_wire.cc and the
// listener/dialer code that receives them): everything a peer process controls.
//
// The first input byte picks what the rest is fed to:
//   0  decode_hello, and re-encoding a decoded hello gives the same hello back
//   1  decode_reply, likewise
//   2  parse_control on arbitrary control bytes (the walk must stay inside the buffer)
//   3  the real receive path: the bytes go as one SOCK_SEQPACKET message, with 0..7
//      eventfds, to a live rendezvous record, as a hello or as the `where` after a valid
//      hello; match() must refuse or accept it without leaking a descriptor, and the table
//      must end up empty
//   4  the same towards a Dialer: the bytes are the reply of a fake acceptor
//   5  decode_where, and re-encoding a decoded where gives the same where back
//   6  decode_withdraw, likewise (mode 3 also feeds withdrawals to the listener: any
//      input after a valid hello is taken by the kind byte it carries)
// Invariants abort on violation, on top of the sanitizers' checks.
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "real.hpp"
#include "shm_rendezvous.hpp"
#include "shm_rendezvous_channels.hpp"
#include "shm_rendezvous_io.hpp"
#include "shm_rendezvous_name.hpp"
#include "shm_rendezvous_wire.hpp"

// The real libc entry points without the rest of the core (src/real.cc also adopts
// inherited sockets into the fd table): this binary has no hooks, so RTLD_DEFAULT is libc.
namespace fastsock::detail {
RealLibc g_real{};
std::atomic<bool> g_real_ready{false};
void resolve_real() noexcept {
#define FUZZ_RESOLVE(name, ret, args) \
  g_real.name = reinterpret_cast<decltype(g_real.name)>(dlsym(RTLD_DEFAULT, #name));
  FASTSOCK_REAL_FUNCTIONS(FUZZ_RESOLVE)
#undef FUZZ_RESOLVE
  g_real_ready.store(true, std::memory_order_release);
}
}  // namespace fastsock::detail

using namespace fastsock;
using namespace fastsock::shm;

namespace {

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz_rendezvous: invariant failed: %s (line %d)\n", #cond,     \
                   __LINE__);                                                              \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

int count_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

void check_hello(const uint8_t* data, size_t size) {
  Hello h;
  if (decode_hello(data, size, false, h)) return;
  FUZZ_CHECK(size == sizeof(HelloWire));
  FUZZ_CHECK(h.fd_count <= kMaxPassedFds);
  FUZZ_CHECK(h.pid > 0 && h.server_port != 0 && h.cookie != 0);
  const HelloWire w = encode_hello(h);
  FUZZ_CHECK(memcmp(&w, data, sizeof w) == 0);  // one encoding per hello
  Hello again;
  FUZZ_CHECK(decode_hello(&w, sizeof w, false, again) == nullptr);
  FUZZ_CHECK(again.pid == h.pid && again.nonce == h.nonce && again.fd_count == h.fd_count);
  FUZZ_CHECK(again.cookie == h.cookie);
  FUZZ_CHECK(decode_hello(&w, sizeof w, true, again) != nullptr);  // truncated: refused
}

void check_reply(const uint8_t* data, size_t size) {
  Reply r;
  if (decode_reply(data, size, false, r)) return;
  FUZZ_CHECK(size == sizeof(ReplyWire));
  FUZZ_CHECK(strlen(r.reason) < kReasonMax);
  FUZZ_CHECK(r.accepted ? r.reason[0] == '\0' && r.fd_count <= kMaxPassedFds
                        : r.fd_count == 0);
  const ReplyWire w = encode_reply(r.accepted, r.pid, r.nonce, r.fd_count, r.reason);
  FUZZ_CHECK(memcmp(&w, data, sizeof w) == 0);  // one encoding per reply
}

void check_control(const uint8_t* data, size_t size) {
  alignas(cmsghdr) uint8_t buf[2 * kControlBytes];
  const size_t n = size < sizeof buf ? size : sizeof buf;
  memcpy(buf, data, n);
  msghdr msg{};
  msg.msg_control = buf;
  msg.msg_controllen = n;
  ControlData c;
  parse_control(msg, c);  // never closes: the numbers here are not descriptors
  FUZZ_CHECK(c.fd_count >= 0 && c.fd_count <= kControlFdCap);
}

// Sends `size` bytes with `nfds` fresh eventfds (up to 7: more than a hello may carry, and
// more than the receive buffer holds) and closes our copies.
bool send_raw(int fd, const uint8_t* data, size_t size, int nfds) {
  int fds[7];
  for (int i = 0; i < nfds; ++i) fds[i] = eventfd(0, EFD_CLOEXEC);
  iovec iov{const_cast<uint8_t*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * size_t(nfds));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * size_t(nfds));
    memcpy(CMSG_DATA(c), fds, sizeof(int) * size_t(nfds));
  }
  const bool ok = sendmsg(fd, &msg, MSG_NOSIGNAL) == ssize_t(size);
  for (int i = 0; i < nfds; ++i) close(fds[i]);
  return ok;
}

// A record on a port of its own per fuzzing process; no TCP listener is needed.
const stats::Endpoint& record_endpoint() {
  static stats::Endpoint ep = [] {
    stats::Endpoint e{};
    e.family = AF_INET;
    e.port = uint16_t(20000 + getpid() % 20000);
    e.addr[0] = 127;
    e.addr[3] = 1;
    return e;
  }();
  return ep;
}

// Mode 3. flags: bit 0-2 fd count; bit 3 patch in our pid and the record's port (or, for
// a where, the hello's cookie), so that inputs get past the checks and exercise acceptance
// too; bit 4 the input is the `where` after a valid hello, not the hello.
void check_listener(uint8_t flags, const uint8_t* data, size_t size) {
  static Listener listener;
  if (listener.fd() < 0) {
    const char* why = nullptr;
    FUZZ_CHECK(listener.open(record_endpoint(), &why) == 0);
  }
  constexpr uint64_t kCookie = 77;
  const bool as_where = flags & 16;
  uint8_t msg[sizeof(HelloWire) + 8];
  if (size > sizeof msg) size = sizeof msg;
  memcpy(msg, data, size);
  if ((flags & 8) && !as_where && size == sizeof(HelloWire)) {
    const int32_t pid = getpid();
    const uint16_t port = record_endpoint().port;
    memcpy(msg + offsetof(HelloWire, pid), &pid, sizeof pid);
    memcpy(msg + offsetof(HelloWire, server_port), &port, sizeof port);
  }
  if ((flags & 8) && as_where && size == sizeof(WhereWire))
    memcpy(msg + offsetof(WhereWire, cookie), &kCookie, sizeof kCookie);
  Hello h;
  Where w;
  Hello good;
  good.pid = getpid();
  good.cookie = kCookie;
  good.server_port = record_endpoint().port;
  const HelloWire good_wire = encode_hello(good);
  const bool valid = as_where ? decode_where(msg, size, false, w) == nullptr && w.cookie == kCookie
                              : decode_hello(msg, size, false, h) == nullptr;
  if (as_where) h = good;

  const int before = count_fds();
  {
    sockaddr_un a;
    const socklen_t len = record_address(geteuid(), record_endpoint(), Stack::dual, a);
    const int raw = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(connect(raw, reinterpret_cast<sockaddr*>(&a), len) == 0);
    if (as_where) FUZZ_CHECK(send_message(raw, &good_wire, sizeof good_wire, nullptr, 0) == 0);
    const bool sent = send_raw(raw, msg, size, flags & 7);
    // By the where's endpoint (made up: a where read names it, sock_diag is not asked for
    // a hello whose where was read), or by the hello's cookie.
    MatchResult m = as_where ? listener.match(valid ? w.connector : record_endpoint(),
                                              valid ? w.connector : record_endpoint())
                             : listener.match(valid ? h.cookie : 1);
    FUZZ_CHECK(m.status != MatchStatus::error);
    if (m.status == MatchStatus::matched) {
      FUZZ_CHECK(valid && sent);
      FUZZ_CHECK(as_where ? (flags & 7) == 0 : true);
      FUZZ_CHECK(m.handshake.fds().count() == h.fd_count);
      const char* why = nullptr;
      FUZZ_CHECK(m.handshake.reject("fuzz", &why) == 0);
    }
    close(raw);
    // The closed channel (with whatever it sent) is dropped at the next look: nothing is
    // left in the table.
    (void)listener.match(uint64_t(1));
    FUZZ_CHECK(listener.pending() == 0);
    FUZZ_CHECK(listener.channels() == 0);
  }
  FUZZ_CHECK(count_fds() == before);
}

void check_where(const uint8_t* data, size_t size) {
  Where w;
  if (decode_where(data, size, false, w)) return;
  FUZZ_CHECK(size == sizeof(WhereWire));
  FUZZ_CHECK(w.cookie != 0 && w.connector.port != 0);
  FUZZ_CHECK(w.connector.family == AF_INET || w.connector.family == AF_INET6);
  const WhereWire again_wire = encode_where(w);
  Where again;
  FUZZ_CHECK(decode_where(&again_wire, sizeof again_wire, false, again) == nullptr);
  FUZZ_CHECK(again.cookie == w.cookie && same_endpoint(again.connector, w.connector));
  FUZZ_CHECK(decode_where(&again_wire, sizeof again_wire, true, again) != nullptr);
}

void check_withdraw(const uint8_t* data, size_t size) {
  Withdraw w;
  if (decode_withdraw(data, size, false, w)) return;
  FUZZ_CHECK(size == sizeof(WithdrawWire));
  FUZZ_CHECK(w.cookie != 0);
  const WithdrawWire again_wire = encode_withdraw(w);
  Withdraw again;
  FUZZ_CHECK(decode_withdraw(&again_wire, sizeof again_wire, false, again) == nullptr);
  FUZZ_CHECK(again.cookie == w.cookie && again.nonce == w.nonce);
  FUZZ_CHECK(memcmp(&again_wire, data, sizeof again_wire) == 0);
  FUZZ_CHECK(decode_withdraw(&again_wire, sizeof again_wire, true, again) != nullptr);
}

// Mode 4: a fake acceptor answers a real Dialer with the input.
void check_dialer(uint8_t flags, const uint8_t* data, size_t size) {
  stats::Endpoint where = record_endpoint();
  where.port = uint16_t(where.port + 1);
  static int record = -1;
  if (record < 0) {
    // A bare record and its presence socket (what Dialer::dial looks for).
    sockaddr_un a;
    const socklen_t len = record_address(geteuid(), where, Stack::dual, a);
    record = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(bind(record, reinterpret_cast<sockaddr*>(&a), len) == 0);
    FUZZ_CHECK(listen(record, 8) == 0);
    const int presence = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(bind(presence, reinterpret_cast<sockaddr*>(&a), len) == 0);
    // The dialer's per-thread probe socket exists from here on, before any counting.
    Dialer warm;
    const char* why = nullptr;
    sockaddr_in none{};
    none.sin_family = AF_INET;
    none.sin_port = htons(1);
    warm.dial(reinterpret_cast<sockaddr*>(&none), sizeof none, &why);
  }
  uint8_t msg[sizeof(ReplyWire) + 8];
  if (size > sizeof msg) size = sizeof msg;
  memcpy(msg, data, size);

  const int before = count_fds();
  {
    Dialer d;
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(where.port);
    memcpy(&dst.sin_addr, where.addr, 4);
    const char* why = nullptr;
    FUZZ_CHECK(d.dial(reinterpret_cast<sockaddr*>(&dst), sizeof dst, &why) == 0);
    FUZZ_CHECK(d.send_hello(1, nullptr, 0, &why) == 0);
    if ((flags & 8) && size == sizeof(ReplyWire)) {
      const uint64_t nonce = d.nonce();
      memcpy(msg + offsetof(ReplyWire, nonce), &nonce, sizeof nonce);
    }
    const int conn = accept(record, nullptr, nullptr);
    FUZZ_CHECK(conn >= 0);
    const bool sent = send_raw(conn, msg, size, flags & 7);
    Reply reply;
    PassedFds got;
    const ReplyStatus st = d.poll_reply(reply, got, &why);
    FUZZ_CHECK(st != ReplyStatus::pending || !sent);
    if (st == ReplyStatus::accepted) FUZZ_CHECK(got.count() == reply.fd_count);
    else FUZZ_CHECK(got.count() == 0);
    close(conn);
    channels::close_all();  // a well-formed reply left the channel idle for reuse
  }
  FUZZ_CHECK(count_fds() == before);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0] % 7, flags = data[1];
  data += 2;
  size -= 2;
  switch (mode) {
    case 0: check_hello(data, size); break;
    case 1: check_reply(data, size); break;
    case 2: check_control(data, size); break;
    case 3: check_listener(flags, data, size); break;
    case 4: check_dialer(flags, data, size); break;
    case 5: check_where(data, size); break;
    case 6: check_withdraw(data, size); break;
  }
  return 0;
}
