#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "endpoint.hpp"
#include "modes.hpp"
#include "net.hpp"
#include "protocol.hpp"
#include "session.hpp"

namespace fastsock_pipe {
namespace {

// A request from the peer is untrusted input: bound everything it makes this end allocate.
constexpr uint64_t kMaxBytes = 1ull << 31;
constexpr uint64_t kMaxPool = 1ull << 33;

bool valid(const SizeRequest& r) {
  return r.version == kProtocolVersion && r.command == static_cast<uint32_t>(Command::size) &&
         r.bytes > 0 && r.bytes <= kMaxBytes && r.pool_bytes <= kMaxPool &&
         r.mode <= static_cast<uint32_t>(Mode::bidirectional) &&
         r.element <= static_cast<uint32_t>(ElementType::float64) &&
         r.repeats <= (1ull << 31) && (r.flags & ~kKnownFlags) == 0 &&
         (r.flags & (kFlagTypedApi | kFlagPortableApi)) != (kFlagTypedApi | kFlagPortableApi);
}

ArrayApi requested_api(uint32_t flags) {
  return (flags & kFlagTypedApi)      ? ArrayApi::typed
         : (flags & kFlagPortableApi) ? ArrayApi::portable
                                      : ArrayApi::plain;
}

}  // namespace

int run_receiver(int fd) {
  Endpoint ep;
  ep.fd = fd;
  for (;;) {
    SizeRequest req{};
    if (!recv_all(fd, &req, sizeof req)) return 1;
    from_wire(req);
    if (req.magic != kMagic) {
      std::fprintf(stderr, "fastsock-pipe: receiver: bad request (not a fastsock-pipe peer?)\n");
      return 1;
    }
    if (req.command == static_cast<uint32_t>(Command::end)) break;
    if (!valid(req)) {
      std::fprintf(stderr, "fastsock-pipe: receiver: bad request (protocol version %u, want %u)\n",
                   req.version, kProtocolVersion);
      return 1;
    }
    ep.integrity = (req.flags & kFlagIntegrity) != 0;
    ep.element = static_cast<ElementType>(req.element);
    ep.path = array_path(ep.element, requested_api(req.flags));
    const Mode mode = static_cast<Mode>(req.mode);
    const std::size_t bytes = req.bytes;
    ep.prepare(bytes, req.pool_bytes, mode == Mode::pingpong);
    const uint64_t errors_before = ep.errors;
    for (int64_t t = -1; t < static_cast<int64_t>(req.trials); ++t) {
      const long n = static_cast<long>(t < 0 ? req.warmup : req.repeats);
      if (n == 0) continue;
      if (!rx_phase(mode, ep, bytes, n)) return 1;
    }
    // first_bad is the run's first corrupted byte; the transmitter stops at the first size
    // that reports any, so it is also this size's first.
    SizeReply reply{ep.errors - errors_before, ep.first_bad, static_cast<uint32_t>(ep.path), 0, {}};
    const std::string transport = fd_transport(fd);
    std::memcpy(reply.transport, transport.data(),
                std::min(transport.size(), sizeof reply.transport - 1));
    if (reply.errors != 0)
      std::fprintf(stderr,
                   "fastsock-pipe: receiver: integrity check failed at %zu bytes: %llu corrupted "
                   "byte(s), first at payload offset %llu\n",
                   bytes, static_cast<unsigned long long>(reply.errors),
                   static_cast<unsigned long long>(reply.first_bad_offset));
    to_wire(reply);
    if (!send_all(fd, &reply, sizeof reply)) return 1;
  }
  return ep.errors != 0 ? 1 : 0;
}

}  // namespace fastsock_pipe
