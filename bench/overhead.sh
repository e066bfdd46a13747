#!/usr/bin/env bash
# bench/overhead.sh: what libfastsock costs a program when it only passes calls through.
#
# The preloaded runs use FASTSOCK_TRANSPORTS=tcp: every connection stays on kernel TCP, so
# the difference is the interposition layer's own cost (the foundation's targets). What the
# faster links gain is measured by bench/shm.sh and fastsock-pipe --compare.
#
# Runs each workload without and with LD_PRELOAD=libfastsock.so in one invocation,
# interleaved round by round (A/B, then B/A, ...) so that drift on a noisy machine hits both
# sides alike, and prints medians and the ratio with/without. Each run reports its best
# batch (interference only ever adds time); the table shows the median of those per side.
# Workloads (see docs/benchmarks.md):
#   fileio        64-byte read/write (+ pread/pwrite/lseek) on a tmpfs file (hooks on non-sockets)
#   tcp_pingpong  1-byte ping-pong over loopback, both ends preloaded  (half round trip)
#   tcp_bulk      1 GiB in 64 KiB writes over loopback, 4 batches       (bandwidth)
#   tcp_connect   connect/accept/close loop over loopback               (connections per second)
# plus, when valgrind is installed (full mode), callgrind instruction counts per hooked call,
# a figure that does not depend on timing at all.
#
# The verdict column is information only: the exit status never depends on a timing. It is
# 0 when every run produced a valid number (positive, and `preloaded` as expected), 1 when a
# benchmark program failed or printed garbage, 2 on a usage error, and 77 (skipped) when the
# library is not built.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/overhead.sh [--quick] [--lib PATH] [--json FILE] [--bindir DIR] [--rounds N]
                         [--placement same|cross|none] [--callgrind | --no-callgrind]

  --quick         small counts and 2 rounds: a smoke run that checks the numbers are valid
  --lib PATH      libfastsock.so to preload (default: $FASTSOCK_LIB, else build/preload/)
  --json FILE     also write the results as JSON to FILE
  --bindir DIR    where bench_fileio and bench_tcp are (default: build/bench)
  --rounds N      interleaved without/with rounds (default: 11, quick: 2)
  --placement P   CPUs for the two ends of the TCP workloads (and for fileio):
                  same (default; both on one CPU), cross (CPUs 0 and 1), none (unpinned);
                  see bench_placement_cpus in bench/bench_lib.sh for why same is the default
  --callgrind     measure instructions per hooked call with valgrind (default: full mode only)
  --no-callgrind  skip that
EOF
}

invocation="$0 $*"
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$script_dir")
# shellcheck source=bench_lib.sh
source "$script_dir/bench_lib.sh"
quick=0 lib=${FASTSOCK_LIB:-} json="" bindir="" rounds="" placement=same callgrind=auto
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --lib) lib=${2:?--lib needs a path}; shift ;;
    --json) json=${2:?--json needs a file}; shift ;;
    --bindir) bindir=${2:?--bindir needs a directory}; shift ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --placement) placement=${2:?--placement needs same, cross or none}; shift ;;
    --callgrind) callgrind=yes ;;
    --no-callgrind) callgrind=no ;;
    -h|--help) usage; exit 0 ;;
    *) echo "overhead.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ -z $rounds ]] && rounds=$((quick ? 2 : 11))
if [[ ! $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "overhead.sh: --rounds needs a positive integer" >&2
  exit 2
fi

[[ -z $lib ]] && lib=$repo_dir/build/preload/libfastsock.so
if [[ ! -f $lib ]]; then
  echo "overhead.sh: skipped: $lib not found" \
    "(build it with 'meson setup build && ninja -C build', or pass --lib)"
  exit 77
fi
lib=$(realpath "$lib")
[[ -z $bindir ]] && bindir=$repo_dir/build/bench
for prog in bench_fileio bench_tcp; do
  if [[ ! -x $bindir/$prog ]]; then
    echo "overhead.sh: $bindir/$prog not found; build it (ninja -C build) or pass --bindir" >&2
    exit 1
  fi
done
if [[ $callgrind == auto ]]; then
  callgrind=$([[ $quick == 0 ]] && command -v valgrind >/dev/null && echo yes || echo no)
fi
if [[ $callgrind == yes ]] && ! command -v valgrind >/dev/null; then
  echo "overhead.sh: --callgrind: valgrind is not installed" >&2
  exit 2
fi

bench_workdir overhead

# ---- workloads: name, metric, unit, which way is better, target (max overhead %), argv ----
file_cpu=() tcp_cpus=()
cpus=$(bench_placement_cpus "$placement") || exit 2
if [[ -n $cpus ]]; then
  read -r server_cpu client_cpu <<<"$cpus"
  file_cpu=(--cpu "$client_cpu")
  tcp_cpus=(--cpus "$server_cpu,$client_cpu")
fi
mode=$( ((quick)) && echo quick || echo full )
# Each run reports its best batch; the table reports the median of those over the rounds.
if ((quick)); then
  fileio_args=(--iterations 500 --batches 4)
  pingpong_args=(--iterations 500 --batches 3)
  bulk_args=(--bytes $((32 << 20)) --chunk 65536 --batches 3)
  connect_args=(--connections 200 --batches 3)
else
  fileio_args=(--iterations 2000 --batches 20)                 # 1.44 M calls
  pingpong_args=(--iterations 1000 --batches 10)               # 10 k round trips
  bulk_args=(--bytes $((256 << 20)) --chunk 65536 --batches 4) # 1 GiB
  connect_args=(--connections 500 --batches 10)                # 5 k connections
fi
workloads=(fileio tcp_pingpong tcp_bulk tcp_connect)
declare -A better=([fileio]=lower [tcp_pingpong]=lower [tcp_bulk]=higher [tcp_connect]=higher)
declare -A target=([fileio]=2 [tcp_pingpong]=5 [tcp_bulk]=5 [tcp_connect]=5)

command_of() {   # prints nothing; sets the array `cmd` for workload $1
  case $1 in
    fileio) cmd=("$bindir/bench_fileio" "${fileio_args[@]}" "${file_cpu[@]}") ;;
    tcp_pingpong) cmd=("$bindir/bench_tcp" pingpong "${pingpong_args[@]}" "${tcp_cpus[@]}") ;;
    tcp_bulk) cmd=("$bindir/bench_tcp" bulk "${bulk_args[@]}" "${tcp_cpus[@]}") ;;
    tcp_connect) cmd=("$bindir/bench_tcp" connect "${connect_args[@]}" "${tcp_cpus[@]}") ;;
  esac
}

# Runs one workload in one variant (without|with); appends "round variant workload metric
# unit value" to $tmp/samples, or fails the whole script if the program did not produce a
# valid result line.
run_one() {
  local round=$1 variant=$2 workload=$3 out line value preloaded expected status=0
  command_of "$workload"
  if [[ $variant == with ]]; then
    expected=1
    out=$(env LD_PRELOAD="$lib" FASTSOCK_TRANSPORTS=tcp "${cmd[@]}" 2>"$tmp/stderr") || status=$?
  else
    expected=0
    out=$(env -u LD_PRELOAD "${cmd[@]}" 2>"$tmp/stderr") || status=$?
  fi
  line=$(grep '^result ' <<<"$out" || true)
  value=$(sed -n 's/.* value=\([0-9.]*\) .*/\1/p' <<<"$line")
  preloaded=$(sed -n 's/.* preloaded=\([01]\).*/\1/p' <<<"$line")
  if ((status != 0)) || [[ -z $line || -z $value ]] ||
     ! awk -v v="$value" 'BEGIN { exit !(v + 0 > 0) }'; then
    echo "overhead.sh: $workload ($variant) produced no valid result (exit status $status):" \
      "${cmd[*]}" >&2
    echo "--- stdout:"$'\n'"$out"$'\n'"--- stderr:" >&2
    cat "$tmp/stderr" >&2
    exit 1
  fi
  if [[ $preloaded != "$expected" ]]; then
    echo "overhead.sh: $workload ($variant): libfastsock mapped=$preloaded, expected $expected" >&2
    exit 1
  fi
  local metric unit
  metric=$(sed -n 's/.* metric=\([^ ]*\) .*/\1/p' <<<"$line")
  unit=$(sed -n 's/.* unit=\([^ ]*\) .*/\1/p' <<<"$line")
  echo "$round $variant $workload $metric $unit $value ${better[$workload]}" \
    "${target[$workload]}" >>"$tmp/samples"
}

busy_before=$(bench_cpu_busy_pct 1)
echo "fastsock overhead benchmark: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(bench_machine)"
echo "command: $invocation"
echo "library: $lib"
echo "mode: $mode, $rounds interleaved rounds, placement: $(bench_placement_text "$placement")"
echo "machine busy before the start (other work sharing the CPUs): ${busy_before}%"
env | grep '^FASTSOCK_' | grep -v '^FASTSOCK_LIB=' | sed 's/^/environment: /' || true

: >"$tmp/samples"
for ((r = 1; r <= rounds; r++)); do
  printf 'round %d/%d ...\n' "$r" "$rounds" >&2
  for w in "${workloads[@]}"; do
    if ((r % 2)); then order=(without with); else order=(with without); fi
    for v in "${order[@]}"; do run_one "$r" "$v" "$w"; done
  done
done

# ---- callgrind: instructions executed in user space per hooked call (noise-free) ---------
# Two runs with different call counts; the difference cancels start-up and set-up costs.
cg_total() {   # variant, then the command: prints the instructions of all its processes
  local variant=$1; shift
  rm -f "$tmp"/cgout.*
  if [[ $variant == with ]]; then
    env LD_PRELOAD="$lib" FASTSOCK_TRANSPORTS=tcp valgrind -q --tool=callgrind --callgrind-out-file="$tmp/cgout.%p" "$@" \
      >/dev/null 2>>"$tmp/cg.stderr"
  else
    env -u LD_PRELOAD valgrind -q --tool=callgrind --callgrind-out-file="$tmp/cgout.%p" "$@" \
      >/dev/null 2>>"$tmp/cg.stderr"
  fi
  awk '/^totals:/ { s += $2 } END { print s + 0 }' "$tmp"/cgout.*
}
: >"$tmp/callgrind"
if [[ $callgrind == yes ]]; then
  echo "callgrind ..." >&2
  # workload, operations per iteration, small N, large N, program and arguments (then N).
  # An operation is: fileio, one libc call (32 of the 36 per iteration are read/write);
  # tcp_pingpong, one read or write on a connected socket (4 per round trip, both ends);
  # tcp_connect, one whole connection, both ends (socket, connect, accept, read, write,
  # setsockopt, two closes).
  cg_specs=(
    "fileio 36 200 1200 bench_fileio --batches 1 --warmup 0 --iterations"
    "tcp_pingpong 4 1000 5000 bench_tcp pingpong --batches 1 --warmup 0 --iterations"
    "tcp_connect 1 100 500 bench_tcp connect --batches 1 --warmup 0 --connections"
  )
  for spec in "${cg_specs[@]}"; do
    read -r w per_iter n1 n2 prog_name prog_args <<<"$spec"
    read -ra prog <<<"$prog_args"
    prog=("$bindir/$prog_name" "${prog[@]}")
    line="$w $(( (n2 - n1) * per_iter ))"
    for v in without with; do
      if ! t1=$(cg_total "$v" "${prog[@]}" "$n1") ||
         ! t2=$(cg_total "$v" "${prog[@]}" "$n2"); then
        echo "overhead.sh: callgrind run of $w ($v) failed:" >&2
        cat "$tmp/cg.stderr" >&2
        exit 1
      fi
      line+=" $((t2 - t1))"
    done
    echo "$line" >>"$tmp/callgrind"
  done
fi

# ---- report ------------------------------------------------------------------------------
for w in "${workloads[@]}"; do command_of "$w"; echo "$w ${cmd[*]}"; done >"$tmp/commands"
awk -f "$script_dir/stats.awk" -f "$script_dir/overhead_report.awk" \
  -v json="$tmp/json" -v date="$(date -u '+%Y-%m-%dT%H:%M:%SZ')" -v nproc="$(nproc)" \
  -v cpu="$(bench_cpu_model)" -v kernel="$(uname -r)" -v lib="$lib" -v mode="$mode" \
  -v busy_before="$busy_before" \
  -v rounds="$rounds" -v invocation="$invocation" \
  -v placement="$(bench_placement_text "$placement")" \
  -v cmdfile="$tmp/commands" -v cgfile="$tmp/callgrind" "$tmp/samples"
cat <<'EOF'

ratio = with / without (medians over the rounds). overhead = extra time per operation (for
rates: without/with - 1). noise = half the interquartile range of the per-round paired
overheads. The verdict is information only; timings never decide this script's exit status.
EOF
[[ -n $json ]] && cp "$tmp/json" "$json"
exit 0
