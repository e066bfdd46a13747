#!/usr/bin/env bash
# bench/wait-ab.sh: two builds of libfastsock.so against each other where programs wait for
# their peer, over loopback, both ends under the library, rounds alternating A and B:
#   redis: redis-server and redis-benchmark with ONE connection (-c 1, GET): both wait in
#          epoll_wait between requests, so the request rate is the wake-up path's;
#   sockperf: `sockperf server` (epoll_wait, its default) and `sockperf ping-pong` (blocking
#          recv): round-trip/2 latency, average and median.
# Prints every round and the medians over the rounds with B/A. For changes to how the
# library waits (spin budget, epoll, poll).
#
#   bench/wait-ab.sh [--rounds N] [--seconds S] LIB_A LIB_B
#
# Exit status: 0 when every run printed its numbers, 1 otherwise, 2 on a usage error, 77
# when sockperf or redis is missing. Timings never decide it.
set -uo pipefail
rounds=5 seconds=2 libs=()
usage() { echo "usage: bench/wait-ab.sh [--rounds N] [--seconds S] LIB_A LIB_B"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) libs+=("$(realpath "$1")") ;;
  esac
  shift
done
((${#libs[@]} == 2)) && [[ -f ${libs[0]} && -f ${libs[1]} ]] || { usage >&2; exit 2; }
for prog in sockperf redis-server redis-benchmark; do
  command -v "$prog" >/dev/null || { echo "wait-ab.sh: skipped: $prog is not installed"; exit 77; }
done
# shellcheck source=bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
bench_workdir wait-ab
failed=0

# sockperf_run WHICH: one server/client pair under library WHICH (0: A, 1: B); prints
# "avg median" (us).
sockperf_run() {
  local lib=${libs[$1]} port srv out=$tmp/client.out
  port=$(bench_free_port) || return 1
  LD_PRELOAD=$lib sockperf server --tcp -i 127.0.0.1 -p "$port" >"$tmp/server.out" 2>&1 &
  srv=$!
  bench_wait_listening "$port" 10 || { kill "$srv"; return 1; }
  # --mps: sockperf sizes its table for 600,000 round trips a second unless told a rate.
  LD_PRELOAD=$lib timeout 60 sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t "$seconds" \
    --mps 1000000 >"$out" 2>&1
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  awk '/Summary: Latency is/ { avg = $(NF - 1) } /percentile 50.000/ { med = $NF }
       END { if (avg == "" || med == "") exit 1; print avg, med }' "$out"
}

# redis_run WHICH: redis-server and redis-benchmark -c 1 under library WHICH; prints
# "requests/s avg_latency_ms".
redis_run() {
  local lib=${libs[$1]} port srv out=$tmp/client.out
  port=$(bench_free_port) || return 1
  LD_PRELOAD=$lib redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    >"$tmp/server.out" 2>&1 &
  srv=$!
  bench_wait_listening "$port" 10 || { kill "$srv"; return 1; }
  LD_PRELOAD=$lib timeout 120 redis-benchmark -h 127.0.0.1 -p "$port" -c 1 -n 50000 -t get \
    --csv >"$out" 2>&1
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  awk -F'"' '$2 == "GET" && $4 > 0 { print $4, $6; found = 1 } END { exit !found }' "$out"
}

echo "waiting programs over loopback, both ends under the library, B against A: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(bench_machine)"
echo "command: bench/wait-ab.sh --rounds $rounds --seconds $seconds ${libs[*]}"
echo "redis: redis-server --port PORT --bind 127.0.0.1 --save '' --appendonly no; redis-benchmark -h 127.0.0.1 -p PORT -c 1 -n 50000 -t get --csv"
echo "sockperf: sockperf server --tcp -i 127.0.0.1 -p PORT; sockperf ping-pong --tcp -i 127.0.0.1 -p PORT -t $seconds --mps 1000000"
cat >"$tmp/report.awk" <<'AWK'
{ n[$1]++; x[$1, n[$1]] = $2; y[$1, n[$1]] = $3 }
END {
  for (w = 0; w < 2; w++) {
    delete a; delete b
    for (i = 1; i <= n[w]; i++) { a[i] = x[w, i]; b[i] = y[w, i] }
    X[w] = quantile(a, n[w], 0.5); Y[w] = quantile(b, n[w], 0.5)
  }
  printf "%s medians over the rounds: %s A %.3f B %.3f (B/A %.2f); %s A %.3f B %.3f (B/A %.2f)\n",
    prog, xn, X[0], X[1], X[1] / X[0], yn, Y[0], Y[1], Y[1] / Y[0]
}
AWK
for prog in redis sockperf; do
  if [[ $prog == redis ]]; then xn=GET_per_s yn=avg_ms; else xn=avg_us yn=median_us; fi
  printf '\n%-8s %-6s %-4s %12s %12s\n' program round lib "$xn" "$yn"
  : >"$tmp/samples"
  for ((r = 1; r <= rounds; r++)); do
    for w in 0 1; do
      if line=$("${prog}_run" "$w"); then
        printf '%-8s %-6s %-4s %12s %12s\n' "$prog" "$r" "$( ((w)) && echo B || echo A)" $line
        echo "$w $line" >>"$tmp/samples"
      else
        echo "wait-ab.sh: FAIL: $prog round $r, library $w: $(tail -2 "$tmp/client.out")" >&2
        failed=1
      fi
    done
  done
  awk -v prog="$prog" -v xn="$xn" -v yn="$yn" -f "$(dirname "$0")/stats.awk" -f "$tmp/report.awk" "$tmp/samples"
done
exit $((failed))
