// `fastsock-pipe compare A.json B.json [--threshold PCT] [--split BYTES]`: per-size
// comparison of two saved runs (docs/fastsock-pipe.md, "Comparing saved runs").
//
// For each transport present in both runs (matched by name; two single-transport runs are
// matched whatever their names) and each size present in both:
//   size <= split: the metric is the median one-way time, and
//                  regression % = (t_B / t_A - 1) * 100;
//   size >  split: the metric is the mean bandwidth over the trials, and
//                  regression % = (bw_A / bw_B - 1) * 100,
// so that both read "how much more time B needs than A". B regresses when any size's
// regression exceeds the threshold (default 10 %). Exit status: 0 no regression, 1
// regression, 2 bad input (unreadable, not a fastsock-pipe schema 2 file, nothing in common).
#pragma once

namespace fastsock_pipe {

int compare_runs_main(int argc, char** argv);

}  // namespace fastsock_pipe
