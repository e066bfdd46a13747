#!/usr/bin/env bash
# bench/spin-cpu.sh: what spinning costs and buys at a moderate message rate. `sockperf
# server` (epoll_wait) and `sockperf ping-pong --mps RATE` (one message every 1/RATE s,
# blocking recv) over loopback, in three setups per round, alternating:
#   tcp    both ends on kernel TCP (no library);
#   fixed  both ends under the library, FASTSOCK_SPIN_ADAPT=0: every wait spins its whole
#          FASTSOCK_SPIN_US budget before it sleeps;
#   adapt  both ends under the library, the default: a thread whose spins run out spins
#          less (link_io::SpinHistory, docs/configuration.md).
# Per setup: the CPU time the server and the client took (percent of one CPU over the run)
# and the round trip / 2 (sockperf's average, us). Prints every round, the medians over the
# rounds and adapt/fixed ratios. A message rate well below 1/budget makes every spin run
# out; an unpaced run (rate 0) answers within the budget, where adapting must change nothing.
#
#   bench/spin-cpu.sh [--rounds N] [--seconds S] [--rates "R1 R2 ..."] [--lib PATH]
#
# Exit status: 0 when every run printed its numbers (the library's runs on shm, as the
# client's debug log says), 1 otherwise, 2 on a usage error, 77 when sockperf is missing.
# Timings never decide it.
set -uo pipefail
rounds=3 seconds=3 rates="1000 10000 20000 0"
lib=$(dirname "$0")/../build/preload/libfastsock.so
usage() { echo "usage: bench/spin-cpu.sh [--rounds N] [--seconds S] [--rates \"R1 R2 ...\"] [--lib PATH]"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --rates) rates=${2:?}; shift ;;
    --lib) lib=${2:?}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
[[ -f $lib ]] || { echo "spin-cpu.sh: no library at $lib (build first)" >&2; exit 2; }
lib=$(realpath "$lib")
command -v sockperf >/dev/null || { echo "spin-cpu.sh: skipped: sockperf is not installed"; exit 77; }
# shellcheck source=bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
bench_workdir spin-cpu
failed=0
ticks_per_s=$(getconf CLK_TCK)

# cpu_ticks PID: user + system time of a live process, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# run SETUP RATE: one server/client pair; prints "server_cpu% client_cpu% half_rtt_us".
run() {
  local setup=$1 rate=$2 port srv out=$tmp/client.out env=(env) t0 t1 mps
  case $setup in
    fixed) env=(env LD_PRELOAD="$lib" FASTSOCK_SPIN_ADAPT=0) ;;
    adapt) env=(env LD_PRELOAD="$lib") ;;
  esac
  rm -f "$tmp/client.log"
  # The client's connection must be on shm (its debug log says so, and never a fallback).
  local log=(FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$tmp/client.log")
  port=$(bench_free_port) || return 1
  "${env[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port" >"$tmp/server.out" 2>&1 &
  srv=$!
  bench_wait_listening "$port" 10 || { kill "$srv"; return 1; }
  t0=$(cpu_ticks "$srv")
  # --mps sizes sockperf's table too: unpaced runs say a rate above any reachable one.
  mps=$((rate > 0 ? rate : 1000000))
  # The client's CPU time: bash's `time` reports its user and system seconds.
  local TIMEFORMAT='%U %S'
  { time "${env[@]}" "${log[@]}" timeout 60 sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" \
      -t "$seconds" --mps "$mps" -m 16 >"$out" 2>&1; } 2>"$tmp/client.time"
  t1=$(cpu_ticks "$srv")
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  if [[ $setup != tcp ]] && { ! grep -q " on shm " "$tmp/client.log" ||
                               grep -q "falls back to tcp" "$tmp/client.log"; }; then
    echo "not on shm: $(grep -m1 "falls back\| on " "$tmp/client.log")" >"$out"
    return 1
  fi
  awk -v s="$(((t1 - t0)))" -v hz="$ticks_per_s" -v secs="$seconds" -v ctime="$(cat "$tmp/client.time")" '
    /Summary: Latency is/ { avg = $(NF - 1) }
    END {
      if (avg == "") exit 1
      split(ctime, c, " ")
      printf "%.1f %.1f %s\n", 100 * s / hz / secs, 100 * (c[1] + c[2]) / secs, avg
    }' "$out"
}

echo "spinning at a moderate message rate, sockperf over loopback: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(bench_machine)"
echo "command: bench/spin-cpu.sh --rounds $rounds --seconds $seconds --rates \"$rates\" --lib $lib"
echo "sockperf server --tcp -i 127.0.0.1 -p PORT; sockperf ping-pong --tcp -i 127.0.0.1 -p PORT -t $seconds --mps RATE -m 16 (rate 0: unpaced)"
printf '\n%-6s %-5s %-6s %10s %10s %12s\n' rate round setup server_cpu% client_cpu% half_rtt_us
: >"$tmp/samples"
for rate in $rates; do
  for ((r = 1; r <= rounds; r++)); do
    for setup in tcp fixed adapt; do
      if line=$(run "$setup" "$rate"); then
        printf '%-6s %-5s %-6s %10s %10s %12s\n' "$rate" "$r" "$setup" $line
        echo "$rate $setup $line" >>"$tmp/samples"
      else
        echo "spin-cpu.sh: FAIL: rate $rate round $r $setup: $(tail -2 "$tmp/client.out")" >&2
        failed=1
      fi
    done
  done
done
cat >"$tmp/report.awk" <<'AWK'
{ k = $1 SUBSEP $2; n[k]++; s[k, n[k]] = $3; c[k, n[k]] = $4; l[k, n[k]] = $5; rate[$1] = 1 }
function med(arr, k,   a, i) { delete a; for (i = 1; i <= n[k]; i++) a[i] = arr[k, i]; return quantile(a, n[k], 0.5) }
END {
  printf "\nmedians over the rounds (server and client CPU in %% of one CPU; half round trip in us)\n"
  printf "%-6s %-6s %10s %10s %12s\n", "rate", "setup", "server", "client", "half_rtt"
  for (r in rate) for (i = 0; i < 3; i++) {
    setup = i == 0 ? "tcp" : i == 1 ? "fixed" : "adapt"; k = r SUBSEP setup
    if (!n[k]) continue
    S[r, setup] = med(s, k); C[r, setup] = med(c, k); L[r, setup] = med(l, k)
    printf "%-6s %-6s %10.1f %10.1f %12.3f\n", r, setup, S[r, setup], C[r, setup], L[r, setup]
  }
  printf "\nadapt against fixed: CPU (server + client) and half round trip\n"
  for (r in rate) {
    f = S[r, "fixed"] + C[r, "fixed"]; a = S[r, "adapt"] + C[r, "adapt"]
    if (f > 0 && L[r, "fixed"] > 0)
      printf "rate %-6s CPU %.2fx (%.1f%% -> %.1f%%), half round trip %.2fx; kernel TCP: CPU %.1f%%, %.3f us\n",
        r, a / f, f, a, L[r, "adapt"] / L[r, "fixed"], S[r, "tcp"] + C[r, "tcp"], L[r, "tcp"]
  }
}
AWK
awk -f "$(dirname "$0")/stats.awk" -f "$tmp/report.awk" "$tmp/samples"
exit $((failed))
