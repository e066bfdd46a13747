#include "runner.hpp"

#include <algorithm>
#include <cstdio>

#include "endpoint.hpp"
#include "modes.hpp"
#include "net.hpp"
#include "protocol.hpp"
#include "schedule.hpp"

namespace fastsock_pipe {
namespace {

// NetPIPE 3.7's constants (as Debian's NPtcp is built, without -DFINAL): at least TRIALS = 3
// repetitions per trial, and no further size once one message takes STOPTM seconds.
constexpr long kMinRepeats = 3;
constexpr double kStopSeconds = 1.0;
// Round trips of NetPIPE's initial latency probe, which seeds the repeat rule.
constexpr long kProbeRoundTrips = 100;

bool send_request(int fd, Command cmd, std::size_t bytes, long repeats, int warmup, int trials,
                  uint32_t flags) {
  SizeRequest r{kMagic, static_cast<uint32_t>(cmd), bytes, static_cast<uint64_t>(repeats),
                static_cast<uint32_t>(warmup), static_cast<uint32_t>(trials), flags, 0};
  to_wire(r);
  return send_all(fd, &r, sizeof r);
}

// One size on the transmitter side; fills samples/trial_means and the receiver's reply.
bool transmit_size(Endpoint& ep, const Options& opt, std::size_t bytes, long reps, int warmup,
                   int trials, std::vector<double>& samples, std::vector<double>& trial_means,
                   SizeReply& reply) {
  uint32_t flags = (opt.stream ? kFlagStream : 0) | (opt.integrity ? kFlagIntegrity : 0);
  if (!send_request(ep.fd, Command::size, bytes, reps, warmup, trials, flags)) return false;
  ep.resize(bytes);
  for (int t = -1; t < trials; ++t) {
    const bool timed = t >= 0;  // t == -1 is the untimed warm-up
    const long n = timed ? reps : warmup;
    if (n == 0) continue;
    double elapsed = 0;
    if (opt.stream) {
      if (!stream_tx_phase(ep, bytes, n, &elapsed)) return false;
      if (timed) {
        samples.push_back(elapsed / static_cast<double>(n));
        trial_means.push_back(elapsed / static_cast<double>(n));
      }
    } else {
      if (!pingpong_tx_phase(ep, bytes, n, timed ? &samples : nullptr, &elapsed)) return false;
      if (timed) trial_means.push_back(elapsed / static_cast<double>(n) / 2.0);
    }
  }
  if (!recv_all(ep.fd, &reply, sizeof reply)) return false;
  from_wire(reply);
  return true;
}

}  // namespace

bool run_transmitter(int fd, const Options& opt, const RowCallback& on_row, RunResult& result) {
  const double run_start = now_seconds();
  Endpoint ep;
  ep.fd = fd;
  ep.integrity = opt.integrity;
  ep.corrupt_at = opt.corrupt_at;

  // NetPIPE's probe: 100 untimed-per-message round trips at the first size give tlast.
  std::vector<double> samples, means;
  SizeReply reply{};
  if (!transmit_size(ep, opt, opt.lower, kProbeRoundTrips, 0, 1, samples, means, reply))
    return false;
  double tlast = means.empty() ? 1e-5 : means.front();
  if (opt.stream) tlast = std::max(tlast, 1e-9);
  std::size_t prev_bytes = opt.lower;

  const std::vector<SizePoint> schedule = build_schedule(opt.lower, opt.upper, opt.perturbation);
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    const SizePoint& pt = schedule[i];
    if (opt.max_time > 0 && now_seconds() - run_start >= opt.max_time) {
      result.stopped_early = true;
      result.stop_reason = "--max-time reached";
      break;
    }
    if (tlast >= kStopSeconds) {
      result.stopped_early = true;
      result.stop_reason = "one message took longer than 1 s (NetPIPE's stop time)";
      break;
    }
    const long reps = repeat_count(prev_bytes, pt.inc, tlast, opt.trial_time, kMinRepeats);
    // Warm-up: a quarter of a trial, untimed, so connection buffers, caches and the peer's
    // scheduler have settled before the first timed trial.
    const int warmup = static_cast<int>(std::clamp(reps / 4, 1L, 1L << 30));
    samples.clear();
    means.clear();
    reply = {};
    const uint64_t errors_before = ep.errors;
    if (!transmit_size(ep, opt, pt.bytes, reps, warmup, opt.trials, samples, means, reply))
      return false;
    SizeStats s = summarize_size(pt.bytes, reps, samples, means);
    result.sizes.push_back(s);
    if (on_row) on_row(s, i, schedule.size());
    tlast = std::max(s.t_best_trial, 1e-9);
    prev_bytes = pt.bytes;
    const uint64_t tx_errors = ep.errors - errors_before;
    if (reply.errors != 0 || tx_errors != 0) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "integrity check failed at %zu bytes: receiver found %llu corrupted byte(s)"
                    "%s%llu, transmitter found %llu in the echoes",
                    pt.bytes, static_cast<unsigned long long>(reply.errors),
                    reply.errors ? ", first at payload offset " : "",
                    static_cast<unsigned long long>(reply.errors ? reply.first_bad_offset : 0),
                    static_cast<unsigned long long>(tx_errors));
      result.integrity_failed = true;
      result.integrity_message = msg;
      break;
    }
  }
  send_request(fd, Command::end, 0, 0, 0, 0, 0);
  result.summary = summarize_run(result.sizes);
  result.wall_seconds = now_seconds() - run_start;
  return true;
}

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
    if (req.command != static_cast<uint32_t>(Command::size) || req.bytes == 0 ||
        req.bytes > (1ull << 31)) {
      std::fprintf(stderr, "fastsock-pipe: receiver: bad request\n");
      return 1;
    }
    ep.integrity = (req.flags & kFlagIntegrity) != 0;
    const bool stream = (req.flags & kFlagStream) != 0;
    const std::size_t bytes = req.bytes;
    ep.resize(bytes);
    const uint64_t errors_before = ep.errors;
    for (int64_t t = -1; t < static_cast<int64_t>(req.trials); ++t) {
      const long n = static_cast<long>(t < 0 ? req.warmup : req.repeats);
      if (n == 0) continue;
      bool ok = stream ? stream_rx_phase(ep, bytes, n) : pingpong_rx_phase(ep, bytes, n);
      if (!ok) return 1;
    }
    // first_bad is the run's first corrupted byte; the transmitter stops at the first size
    // that reports any, so it is also this size's first.
    SizeReply reply{ep.errors - errors_before, ep.first_bad};
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
