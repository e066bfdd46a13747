#!/usr/bin/env bash
# bench/subprocess.sh: what a Python server's subprocess.run costs its connections. The
# server runs subprocess.run(["true"]) (CPython starts it with vfork) after the client's
# first message, then both ping-pong 64-byte messages (bench/subprocess_pingpong.py); the
# client times COUNT round trips. Variants, rounds interleaved: kernel TCP (no library),
# LIB, and OLD_LIB if given (a build from before src/vfork_gate: vfork was fork there, and
# moved the connection to TCP). Prints every round, the medians and their ratios.
#
#   bench/subprocess.sh [--rounds N] [--count N] LIB [OLD_LIB]
#
# Exit status: 0 when every run printed its number, 1 otherwise, 2 on a usage error, 77
# when /usr/bin/python3 is missing. Timings never decide it.
set -uo pipefail
rounds=5 count=20000 libs=()
usage() { echo "usage: bench/subprocess.sh [--rounds N] [--count N] LIB [OLD_LIB]"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=${2:?}; shift ;;
    --count) count=${2:?}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) libs+=("$(realpath "$1")") ;;
  esac
  shift
done
((${#libs[@]} >= 1 && ${#libs[@]} <= 2)) || { usage >&2; exit 2; }
for lib in "${libs[@]}"; do [[ -f $lib ]] || { usage >&2; exit 2; }; done
py=/usr/bin/python3
[[ -x $py ]] || { echo "subprocess.sh: skipped: $py is not installed"; exit 77; }
# shellcheck source=bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
bench_workdir subprocess
here=$(cd "$(dirname "$0")" && pwd)
failed=0

# one_run LIB|"": prints microseconds per round trip.
one_run() {
  local preload=$1 port_file=$tmp/port
  rm -f "$port_file"
  env ${preload:+LD_PRELOAD=$preload} "$py" "$here/subprocess_pingpong.py" server "$port_file" \
    >"$tmp/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do [[ -s $port_file ]] && break; sleep 0.05; done
  [[ -s $port_file ]] || { kill "$server_pid"; return 1; }
  env ${preload:+LD_PRELOAD=$preload} timeout 120 "$py" "$here/subprocess_pingpong.py" client \
    "$(cat "$port_file")" "$count" 2>"$tmp/client.log"
  local rc=$?
  wait "$server_pid"
  server_pid=""
  return $rc
}

names=(tcp lib old)
echo "Python ping-pong after the server's subprocess.run: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(bench_machine); CPU busy at start: $(bench_cpu_busy_pct)%"
echo "command: bench/subprocess.sh --rounds $rounds --count $count ${libs[*]}"
echo "lib = ${libs[0]}${libs[1]:+, old = ${libs[1]}}"
printf '%-6s %-4s %14s\n' round run us_per_rtt
: >"$tmp/samples"
for ((r = 1; r <= rounds; r++)); do
  for ((w = 0; w <= ${#libs[@]}; w++)); do
    lib=""
    ((w > 0)) && lib=${libs[w - 1]}
    if us=$(one_run "$lib"); then
      printf '%-6s %-4s %14s\n' "$r" "${names[w]}" "$us"
      echo "$w $us" >>"$tmp/samples"
    else
      echo "subprocess.sh: FAIL: round $r, ${names[w]}: $(tail -2 "$tmp/client.log" "$tmp/server.log")" >&2
      failed=1
    fi
  done
done
cat >"$tmp/report.awk" <<'AWK'
{ n[$1]++; v[$1, n[$1]] = $2 }
END {
  for (w = 0; w < 3; w++) if (n[w]) { delete a; for (i = 1; i <= n[w]; i++) a[i] = v[w, i]; m[w] = quantile(a, n[w], 0.5) }
  printf "medians, us per round trip: tcp %.2f, lib %.2f (lib/tcp %.2f)", m[0], m[1], m[1] / m[0]
  if (n[2]) printf ", old %.2f (lib/old %.2f)", m[2], m[1] / m[2]
  printf "\n"
}
AWK
awk -f "$(dirname "$0")/stats.awk" -f "$tmp/report.awk" "$tmp/samples"
exit $((failed))
