#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "endpoint.hpp"
#include "modes.hpp"
#include "net.hpp"
#include "protocol.hpp"
#include "session.hpp"

namespace fastsock_pipe {
namespace {

uint32_t api_flags(ElementType t, ArrayApi api) {
  if (t == ElementType::byte) return 0;  // bytes always move plain
  return api == ArrayApi::typed ? kFlagTypedApi : api == ArrayApi::portable ? kFlagPortableApi : 0u;
}

class DirectSession final : public Session {
 public:
  DirectSession(int fd, const Options& opt) : mode_(opt.mode) {
    ep_.fd = fd;
    ep_.integrity = opt.integrity;
    ep_.element = opt.element;
    ep_.path = array_path(opt.element, opt.api);
    flags_ = (opt.integrity ? kFlagIntegrity : 0u) | api_flags(opt.element, opt.api);
    ep_.corrupt_at = opt.corrupt_at;
  }
  ~DirectSession() override { close(ep_.fd); }

  bool begin_size(const SizePlan& plan) override {
    plan_ = plan;
    SizeRequest r{kMagic, kProtocolVersion, static_cast<uint32_t>(Command::size),
                  static_cast<uint32_t>(mode_), plan.bytes, static_cast<uint64_t>(plan.repeats),
                  plan.pool_bytes, static_cast<uint32_t>(plan.warmup),
                  static_cast<uint32_t>(plan.trials), flags_,
                  static_cast<uint32_t>(ep_.element)};
    to_wire(r);
    if (!send_all(ep_.fd, &r, sizeof r)) return false;
    ep_.prepare(plan.bytes, plan.pool_bytes, mode_ == Mode::pingpong);
    errors_before_ = ep_.errors;
    double ignored = 0;
    return plan.warmup == 0 || tx_phase(mode_, ep_, plan.bytes, plan.warmup, nullptr, &ignored);
  }

  bool trial(std::vector<double>& samples, double& per_message) override {
    return tx_phase(mode_, ep_, plan_.bytes, plan_.repeats, &samples, &per_message);
  }

  bool end_size(SizeOutcome& out) override {
    SizeReply reply{};
    if (!recv_all(ep_.fd, &reply, sizeof reply)) return false;
    from_wire(reply);
    if (!valid_array_path(reply.array_path)) {
      std::fprintf(stderr, "fastsock-pipe: bad reply from the receiver (array path %u)\n",
                   reply.array_path);
      return false;
    }
    out.rx_path = static_cast<ArrayPath>(reply.array_path);
    out.rx_transport.assign(reply.transport, strnlen(reply.transport, sizeof reply.transport));
    out.tx_path = ep_.path;
    out.tx_transport = fd_transport(ep_.fd);
    out.rx_errors = reply.errors;
    out.rx_first_bad = reply.first_bad_offset;
    out.tx_errors = ep_.errors - errors_before_;
    return true;
  }

  void finish() override {
    SizeRequest r{};
    r.magic = kMagic;
    r.version = kProtocolVersion;
    r.command = static_cast<uint32_t>(Command::end);
    to_wire(r);
    send_all(ep_.fd, &r, sizeof r);
  }

 private:
  Endpoint ep_;
  Mode mode_;
  SizePlan plan_;
  uint32_t flags_ = 0;
  uint64_t errors_before_ = 0;
};

}  // namespace

std::unique_ptr<Session> make_direct_session(int fd, const Options& opt) {
  return std::make_unique<DirectSession>(fd, opt);
}

}  // namespace fastsock_pipe
