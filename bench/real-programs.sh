#!/usr/bin/env bash
# bench/real-programs.sh: unmodified real programs on kernel TCP and under fastsock.
#
# NetPIPE (NPtcp: half round trip at 1-16 bytes, bandwidth at 1-4 MiB messages), iperf3 (one
# stream) and redis-server with redis-benchmark (GET requests over 50 connections) run
# between two processes over loopback, without and with
# LD_PRELOAD=libfastsock.so on BOTH ends, interleaved round by round (A/B, then B/A, ...).
# Each "with" run also writes fastsock's debug log, whose `client ... on <transport>` and
# `server ... on <transport>` lines prove the connections were tracked and say which
# transport carried them. Each "without" run gets the same FASTSOCK_* settings and must
# leave no log at all (the library really was absent).
#
# Exit status: 0 when every run produced its numbers and every "with" run was tracked, 1
# otherwise, 2 on a usage error, 77 (skipped) when the library or a program is missing.
# Timings never decide it.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/real-programs.sh [--quick] [--lib PATH] [--json FILE] [--rounds N]
                              [--placement same|cross|none]

  --quick      small run (NPtcp up to 64 KiB, iperf3 -t 1, 5000 redis requests, 1 round):
               checks the plumbing
  --lib PATH   libfastsock.so to preload (default: $FASTSOCK_LIB, else build/preload/)
  --json FILE  also write the results as JSON to FILE
  --rounds N   interleaved without/with rounds (default: 5, quick: 1)
  --placement  CPUs of the two ends: same (default; both on one CPU), cross (CPUs 0 and 1),
               none (unpinned); see bench_placement_cpus in bench/bench_lib.sh
EOF
}

invocation="$0 $*"
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$script_dir")
# shellcheck source=bench_lib.sh
source "$script_dir/bench_lib.sh"

quick=0 lib=${FASTSOCK_LIB:-} json="" rounds="" placement=same
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --lib) lib=${2:?--lib needs a path}; shift ;;
    --json) json=${2:?--json needs a file}; shift ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --placement) placement=${2:?--placement needs same, cross or none}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "real-programs.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ -z $rounds ]] && rounds=$((quick ? 1 : 5))
if [[ ! $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "real-programs.sh: --rounds needs a positive integer" >&2
  exit 2
fi
[[ -z $lib ]] && lib=$repo_dir/build/preload/libfastsock.so
if [[ ! -f $lib ]]; then
  echo "real-programs.sh: skipped: $lib not found (build it, or pass --lib)"
  exit 77
fi
lib=$(realpath "$lib")
for prog in NPtcp iperf3 redis-server redis-benchmark; do
  if ! command -v "$prog" >/dev/null; then
    echo "real-programs.sh: skipped: $prog is not installed" \
      "(apt-get install netpipe-tcp iperf3 redis-server redis-tools)"
    exit 77
  fi
done

server_pin=() client_pin=()
cpus=$(bench_placement_cpus "$placement") || exit 2
if [[ -n $cpus ]]; then
  read -r server_cpu client_cpu <<<"$cpus"
  server_pin=(taskset -c "$server_cpu")
  client_pin=(taskset -c "$client_cpu")
fi
if ((quick)); then
  np_upper=65536 iperf_seconds=1 np_bw_metric=bandwidth_64KiB_MBps np_repeats=(-n 50)
  redis_requests=5000
else
  np_upper=4194304 iperf_seconds=3 np_bw_metric=bandwidth_1-4MiB_MBps np_repeats=()
  redis_requests=50000
fi

bench_workdir real
fail() { bench_fail real-programs.sh "$@"; }

# Sets the array `venv`: the env(1) prefix for variant $1 (without|with), logging to $2.
# Both variants get the same FASTSOCK_* settings; only LD_PRELOAD differs.
variant_env() {
  if [[ $1 == with ]]; then
    venv=(env LD_PRELOAD="$lib" FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$2")
  else
    venv=(env -u LD_PRELOAD FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$2")
  fi
}

# Starts "$@" (a server, under $venv and pinned) in the background in $tmp and waits until it
# listens on $port. $1 names it in messages.
start_server() {
  local name=$1
  shift
  (cd "$tmp" && exec "${venv[@]}" "${server_pin[@]}" "$@") >"$tmp/$name-server.out" \
    2>"$tmp/$name-server.err" &
  server_pid=$!
  bench_wait_listening "$port" 10 || fail "$name server did not listen on port $port"
}

# Waits (up to 30 s) for the server to exit by itself once its client is done.
wait_server() {
  local name=$1 deadline=$((SECONDS + 30))
  while kill -0 "$server_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
  if kill -0 "$server_pid" 2>/dev/null; then
    fail "$name server did not exit after its client finished"
  fi
  local status=0
  wait "$server_pid" || status=$?
  server_pid=""
  ((status == 0)) || fail "$name server failed (exit status $status)"
}

# NPtcp, variant $1, log $2. Sets `latency` (half round trip, us, 1-16 bytes) and
# `bandwidth` (MB/s, 1-4 MiB; quick mode: the largest size): see nptcp_summary.awk.
run_nptcp() {
  variant_env "$1" "$2"
  port=$(bench_free_port) || fail "no free port"
  local common=(NPtcp -P "$port" -p 0 -u "$np_upper" "${np_repeats[@]}")
  start_server NPtcp "${common[@]}"
  "${venv[@]}" "${client_pin[@]}" "${common[@]}" -h 127.0.0.1 -o "$tmp/np.out" \
    >"$tmp/nptcp-client.out" 2>"$tmp/nptcp-client.err" || fail "NPtcp transmitter failed"
  wait_server NPtcp
  local numbers
  numbers=$(awk -v quick="$quick" -f "$script_dir/stats.awk" \
    -f "$script_dir/nptcp_summary.awk" "$tmp/np.out") || fail "NPtcp wrote no usable np.out"
  read -r latency bandwidth <<<"$numbers"
}

# iperf3 with one stream for $iperf_seconds s, variant $1, log $2. Sets `bandwidth` (the
# receiver's, MB/s).
run_iperf3() {
  variant_env "$1" "$2"
  port=$(bench_free_port) || fail "no free port"
  start_server iperf3 iperf3 -s -1 -B 127.0.0.1 -p "$port"
  "${venv[@]}" "${client_pin[@]}" iperf3 -c 127.0.0.1 -p "$port" -t "$iperf_seconds" -f m \
    >"$tmp/iperf3-client.out" 2>"$tmp/iperf3-client.err" || fail "iperf3 client failed"
  wait_server iperf3
  bandwidth=$(awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Mbits/sec") v = $(i - 1) / 8 }
       END { if (!v) exit 1; printf "%.1f\n", v }' "$tmp/iperf3-client.out") ||
    fail "iperf3 printed no receiver bandwidth"
}

# redis-server and redis-benchmark (GET, 50 connections, $redis_requests requests), variant
# $1, log $2. Sets `rate` (requests per second, as redis-benchmark reports it).
run_redis() {
  variant_env "$1" "$2"
  port=$(bench_free_port) || fail "no free port"
  start_server redis redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no
  "${venv[@]}" "${client_pin[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -c 50 \
    -n "$redis_requests" -t get --csv >"$tmp/redis-client.out" 2>"$tmp/redis-client.err" ||
    fail "redis-benchmark failed"
  kill -TERM "$server_pid"  # redis-server exits with status 0 (nothing to save)
  wait_server redis
  rate=$(awk -F'"' '$2 == "GET" && $4 > 0 { print $4 }' "$tmp/redis-client.out")
  [[ -n $rate ]] || fail "redis-benchmark printed no GET rate"
}

# Checks the log of one run of program $3: "with" ($1) must show tracked connections on both
# sides, "without" must leave no log at all. Sets `clients`, `servers` (log line counts) and
# `transports` (comma-separated transports named in those lines, "-" for none).
check_log() {
  local variant=$1 log=$2 name=$3
  clients=0 servers=0 transports=-
  if [[ $variant == without ]]; then
    [[ ! -s $log ]] || fail "$name without the library still wrote a fastsock log: $log"
    return 0
  fi
  [[ -s $log ]] || fail "$name under the library wrote no fastsock log (FASTSOCK_LOG=debug)"
  clients=$(grep -cE 'debug: fd=[0-9]+ client .* on [a-z]+' "$log" || true)
  servers=$(grep -cE 'debug: fd=[0-9]+ server .* on [a-z]+' "$log" || true)
  transports=$(grep -oE 'debug: fd=[0-9]+ (client|server) .* on [a-z]+' "$log" |
    awk '{ print $NF }' | sort -u | paste -sd, -)
  ((clients > 0 && servers > 0)) ||
    fail "$name: fastsock tracked no connection (client lines: $clients, server lines: $servers)"
}

busy_before=$(bench_cpu_busy_pct 1)
echo "fastsock real-program comparison: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(bench_machine)"
echo "command: $invocation"
echo "library: $lib"
echo "mode: $( ((quick)) && echo quick || echo full ), $rounds interleaved rounds," \
  "placement: $(bench_placement_text "$placement")"
echo "machine busy before the start (other work sharing the CPUs): ${busy_before}%"
echo "NPtcp: NPtcp -P PORT -p 0 -u $np_upper (receiver), same plus -h 127.0.0.1 -o np.out" \
  "(transmitter)"
echo "iperf3: iperf3 -s -1 -B 127.0.0.1 -p PORT; iperf3 -c 127.0.0.1 -p PORT" \
  "-t $iperf_seconds -f m"
echo "redis: redis-server --port PORT --bind 127.0.0.1 --save '' --appendonly no;" \
  "redis-benchmark -h 127.0.0.1 -p PORT -c 50 -n $redis_requests -t get --csv"

: >"$tmp/samples"   # round variant program metric value clients servers transports
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(without with); else order=(with without); fi
  for v in "${order[@]}"; do
    echo "round $r/$rounds: NPtcp $v ..." >&2
    log="$tmp/nptcp-$r-$v.log"
    run_nptcp "$v" "$log"
    check_log "$v" "$log" NPtcp
    echo "$r $v NPtcp latency_1-16B_us $latency $clients $servers $transports" >>"$tmp/samples"
    echo "$r $v NPtcp $np_bw_metric $bandwidth $clients $servers $transports" >>"$tmp/samples"
  done
  for v in "${order[@]}"; do
    echo "round $r/$rounds: iperf3 $v ..." >&2
    log="$tmp/iperf3-$r-$v.log"
    run_iperf3 "$v" "$log"
    check_log "$v" "$log" iperf3
    echo "$r $v iperf3 bandwidth_MBps $bandwidth $clients $servers $transports" \
      >>"$tmp/samples"
  done
  for v in "${order[@]}"; do
    echo "round $r/$rounds: redis $v ..." >&2
    log="$tmp/redis-$r-$v.log"
    run_redis "$v" "$log"
    check_log "$v" "$log" redis
    echo "$r $v redis GET_requests_per_s $rate $clients $servers $transports" >>"$tmp/samples"
  done
done

awk -f "$script_dir/stats.awk" -f "$script_dir/real_programs_report.awk" \
  -v json="$tmp/json" -v date="$(date -u '+%Y-%m-%dT%H:%M:%SZ')" -v nproc="$(nproc)" \
  -v cpu="$(bench_cpu_model)" -v kernel="$(uname -r)" -v lib="$lib" -v rounds="$rounds" \
  -v invocation="$invocation" -v busy_before="$busy_before" \
  -v placement="$(bench_placement_text "$placement")" \
  -v mode="$( ((quick)) && echo quick || echo full )" "$tmp/samples"

cat <<'EOF'

ratio = under fastsock / kernel TCP (medians over the rounds; for latency lower is better, for
bandwidth and request rate higher is better). "transport" is read from fastsock's debug log of the runs.
Both ends of every connection run on this host under the default chain, so the library
carries them over shm (the "transport" column shows what each run used); a run whose
connections stayed on kernel TCP would measure the pass-through layer's cost instead, a
ratio of about 1.0 (bench/overhead.sh measures that cost on purpose).
EOF
if ((quick)); then
  echo "Quick mode: one short round, a check of the plumbing; its ratios are not measurements."
fi
[[ -n $json ]] && cp "$tmp/json" "$json"
exit 0
