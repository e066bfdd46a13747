// The message-size schedule and repeat rule of NetPIPE 3.7 (netpipe.c, main loop), so that
// fastsock-pipe's rows line up with NPtcp's.
#pragma once

#include <cstddef>
#include <vector>

namespace fastsock_pipe {

struct SizePoint {
  std::size_t bytes;  // message size of this row
  std::size_t inc;    // NetPIPE's increment when the row was produced (used by the repeat rule)
};

// NetPIPE's sequence exactly: base points start, ... growing as 2^k and 3*2^k, each one
// perturbed by -p, 0, +p once the increment exceeds p+1. Like NetPIPE, a perturbed point may
// exceed `end` by up to p bytes (the loop bounds the base point, not its perturbations).
std::vector<SizePoint> netpipe_schedule(std::size_t start, std::size_t end, int perturbation);

// netpipe_schedule() plus `end` itself, inserted in order when NetPIPE's sequence misses it,
// so that the requested upper bound is always measured.
std::vector<SizePoint> build_schedule(std::size_t start, std::size_t end, int perturbation);

// NetPIPE's repeat rule: enough repetitions to fill `target_seconds` per trial, extrapolating
// from the previous row's half round-trip time `tlast` (seconds) at `prev_bytes`, and never
// fewer than `min_repeats`.
long repeat_count(std::size_t prev_bytes, std::size_t inc, double tlast, double target_seconds,
                  long min_repeats);

}  // namespace fastsock_pipe
