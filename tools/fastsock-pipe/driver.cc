#include "driver.hpp"

#include <algorithm>
#include <cstdio>

#include "cache_size.hpp"
#include "endpoint.hpp"
#include "schedule.hpp"

namespace fastsock_pipe {
namespace {

// NetPIPE 3.7's constants (as Debian's NPtcp is built, without -DFINAL): at least TRIALS = 3
// repetitions per trial, and no further size once one message takes STOPTM seconds.
constexpr long kMinRepeats = 3;
constexpr double kStopSeconds = 1.0;
// Round trips of NetPIPE's initial latency probe, which seeds the repeat rule.
constexpr long kProbeRoundTrips = 100;

struct LaneState {
  double tlast = 1e-5;
  std::size_t prev_bytes = 0;
  SizePlan plan;
  std::vector<double> samples, means, trial_starts;
};

void fail_lane(Lane& lane, std::size_t bytes, const char* step) {
  lane.status = "failed";
  lane.reason = std::string("connection failed during ") + step + " at " + std::to_string(bytes) +
                " bytes (the reason is on stderr)";
  std::fprintf(stderr, "fastsock-pipe: %s: %s\n", lane.name.c_str(), lane.reason.c_str());
  lane.session = nullptr;
}

// Runs `plan` on every live lane, trials interleaved; fills each lane's samples and means.
void measure(std::vector<Lane>& lanes, std::vector<LaneState>& st, std::vector<SizeOutcome>& out,
             int trials, double run_start) {
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    st[i].samples.clear();
    st[i].means.clear();
    st[i].trial_starts.clear();
    out[i] = {};
    if (lanes[i].session && !lanes[i].session->begin_size(st[i].plan))
      fail_lane(lanes[i], st[i].plan.bytes, "the warm-up");
  }
  for (int t = 0; t < trials; ++t) {
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      if (!lanes[i].session) continue;
      double mean = 0;
      st[i].trial_starts.push_back(now_seconds() - run_start);
      if (lanes[i].session->trial(st[i].samples, mean)) st[i].means.push_back(mean);
      else fail_lane(lanes[i], st[i].plan.bytes, "a trial");
    }
  }
  for (std::size_t i = 0; i < lanes.size(); ++i)
    if (lanes[i].session && !lanes[i].session->end_size(out[i]))
      fail_lane(lanes[i], st[i].plan.bytes, "the size's report");
}

bool any_live(const std::vector<Lane>& lanes) {
  return std::any_of(lanes.begin(), lanes.end(), [](const Lane& l) { return l.session; });
}

}  // namespace

bool run_lanes(std::vector<Lane>& lanes, const Options& opt, const RowCallback& on_row,
               RunInfo& info) {
  const double run_start = now_seconds();
  const std::size_t esize = element_size(opt.element);
  const int directions = mode_directions(opt.mode);
  const std::size_t cache = opt.cache_invalidate ? cache_bytes_to_exceed(opt.cache_bytes) : 0;
  // -I: each direction's buffer pool exceeds the cache by an eighth, the same at every size
  // (so the ends allocate it once); a message larger than the pool simply gets one slot.
  const std::size_t pool = cache ? cache + cache / 8 : 0;
  std::vector<LaneState> st(lanes.size());
  std::vector<SizeOutcome> outcome(lanes.size());

  // NetPIPE's probe: 100 round trips at the first size give tlast.
  for (LaneState& s : st) {
    s.plan = {opt.lower * esize, kProbeRoundTrips, 0, 1, pool};
    s.prev_bytes = opt.lower * esize;
  }
  measure(lanes, st, outcome, 1, run_start);
  for (LaneState& s : st)
    if (!s.means.empty()) s.tlast = std::max(s.means.front(), 1e-9);

  const std::vector<SizePoint> schedule = build_schedule(opt.lower, opt.upper, opt.perturbation);
  for (std::size_t i = 0; i < schedule.size() && any_live(lanes); ++i) {
    const std::size_t bytes = schedule[i].bytes * esize;
    if (opt.max_time > 0 && now_seconds() - run_start >= opt.max_time) {
      info.stopped_early = true;
      info.stop_reason = "--max-time reached";
      break;
    }
    if (std::any_of(st.begin(), st.end(), [](const LaneState& s) { return s.tlast >= kStopSeconds; })) {
      info.stopped_early = true;
      info.stop_reason = "one message took longer than 1 s (NetPIPE's stop time)";
      break;
    }
    for (LaneState& s : st) {
      const long reps =
          repeat_count(s.prev_bytes, schedule[i].inc * esize, s.tlast, opt.trial_time, kMinRepeats);
      // Warm-up: a quarter of a trial, untimed, so connection buffers, caches and the peer's
      // scheduler have settled before the first timed trial.
      const int warmup = static_cast<int>(std::clamp(reps / 4, 1L, 1L << 30));
      s.plan = {bytes, reps, warmup, opt.trials, pool};
    }
    measure(lanes, st, outcome, opt.trials, run_start);
    bool integrity_failed = false;
    for (std::size_t k = 0; k < lanes.size(); ++k) {
      Lane& lane = lanes[k];
      if (!lane.session) continue;
      SizeStats s = summarize_size(bytes, st[k].plan.repeats, st[k].samples, st[k].means, directions);
      s.trial_starts = st[k].trial_starts;
      lane.result.sizes.push_back(s);
      st[k].tlast = std::max(s.t_best_trial, 1e-9);
      st[k].prev_bytes = bytes;
      const SizeOutcome& o = outcome[k];
      lane.tx_path = array_path_name(o.tx_path);
      lane.rx_path = array_path_name(o.rx_path);
      lane.tx_transport = o.tx_transport;
      lane.rx_transport = o.rx_transport;
      lane.result.sizes.back().corrupted = o.rx_errors + o.tx_errors;
      if (o.rx_errors != 0 || o.tx_errors != 0) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "integrity check failed at %zu bytes: receiver found %llu corrupted byte(s)"
                      "%s%llu, transmitter found %llu in the echoes",
                      bytes, static_cast<unsigned long long>(o.rx_errors),
                      o.rx_errors ? ", first at payload offset " : "",
                      static_cast<unsigned long long>(o.rx_errors ? o.rx_first_bad : 0),
                      static_cast<unsigned long long>(o.tx_errors));
        lane.result.integrity_failed = true;
        lane.result.integrity_message = msg;
        integrity_failed = true;
      }
    }
    if (on_row) on_row(i, schedule.size());
    if (integrity_failed) break;  // a corrupted byte makes every later number meaningless
  }
  for (Lane& lane : lanes) {
    if (lane.session) lane.session->finish();
    lane.result.summary = summarize_run(lane.result.sizes);
  }
  info.wall_seconds = now_seconds() - run_start;
  return std::any_of(lanes.begin(), lanes.end(), [](const Lane& l) { return l.status == "ok"; });
}

}  // namespace fastsock_pipe
