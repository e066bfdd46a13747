#!/usr/bin/env bash
# bench/verbs.sh: the verbs link against kernel TCP and rsocket, with the raw-verbs floor, in
# one run inside the Soft-RoCE VM (issue 6; results in bench/results/verbs.txt and docs/verbs.md, "Measured").
#
#   bench/verbs.sh [--quick] [--out FILE]
#
# From the host it boots the VM (tests/rdma/run_in_vm.sh) and runs itself there. Every
# connection goes to the VM's RDMA address ($SOFTROCE_ADDR, not loopback: rsocket cannot
# route 127.0.0.1 over rxe and would silently measure TCP). In the guest, one after another:
#   - perftest, the floor: ib_send_lat (half round trip of SENDs) and ib_write_bw (RDMA
#     WRITE bandwidth) at a few sizes;
#   - fastsock-pipe ping-pong, receiver and transmitter as separate processes, over kernel
#     TCP, fastsock's verbs link (FASTSOCK_TRANSPORTS=verbs,tcp), fastsock's vendor link
#     through rsocket (the "adapter": FASTSOCK_TRANSPORTS=vendor,tcp, issue 7) and
#     rsocket's own librspreload.so, each with --json; then `fastsock-pipe compare` prints
#     per-size ratios (time for small sizes, bandwidth for large ones);
#   - NPtcp over the same four, its latency (median of the 1-16 byte rows) and bandwidth
#     (largest size).
# Each run is checked for its link: fastsock's log must show the connection established over
# RDMA and switched (verbs) or carried by rsocket (adapter); under rsocket's preload no
# kernel TCP connection may carry the port (`ss`).
#
# Timings never decide the exit status: 0 when every run produced its numbers, 1 when one
# failed, 2 on a usage error, 77 when the VM or the build is not there. Under software
# emulation (TCG) the numbers show the shape, not what hardware does: rxe's per-packet work
# (and its CRC) runs in emulated kernel code, so bandwidth is capped far below TCP's.
set -uo pipefail

usage() { echo "usage: bench/verbs.sh [--quick] [--out FILE]"; }

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
quick=0 out="" in_vm=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --out) out=${2:?}; shift ;;
    --in-vm) in_vm=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
build=${FASTSOCK_BUILD:-$root/build}
lib=$build/preload/libfastsock.so
pipe=$build/tools/fastsock-pipe/fastsock-pipe
rsocket=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)

if ((!in_vm)); then
  [[ -f $lib && -x $pipe ]] || { echo "verbs.sh: skipped: $lib or $pipe not built"; exit 77; }
  [[ -n $out ]] || out=$root/bench/results/verbs$( ((quick)) && echo -quick).txt
  mkdir -p "$(dirname "$out")"
  args=(--out "$out")
  ((quick)) && args+=(--quick)
  FASTSOCK_BUILD=$build exec "$root/tests/rdma/run_in_vm.sh" --timeout 1500 --needs-verbs \
    "$here/verbs.sh" --in-vm "${args[@]}"
fi

# --- in the guest ---
source "$here/bench_lib.sh"
addr=${SOFTROCE_ADDR:?not in the Soft-RoCE VM} dev=${SOFTROCE_DEV:?}
for cmd in ib_send_lat ib_write_bw NPtcp ss; do
  command -v "$cmd" >/dev/null || { echo "verbs.sh: skipped: $cmd is not installed"; exit 77; }
done
[[ -n $rsocket ]] || { echo "verbs.sh: skipped: librspreload.so (librdmacm1) is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/fastsock-bench-verbs.XXXXXX)
failed=0
fail() { echo "verbs.sh: FAIL: $*" >&2; failed=1; }
if ((quick)); then
  upper=65536 trial_time=0.03 nptcp_upper=16384 iters=200
else
  upper=1048576 trial_time=0.1 nptcp_upper=131072 iters=1000
fi
port=20000

# use TRANSPORT: PRE becomes the command prefix that runs a program over TRANSPORT.
use() {
  case $1 in
    tcp) PRE=(env -u LD_PRELOAD) ;;
    fastsock) PRE=(env LD_PRELOAD="$lib" FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug
                   FASTSOCK_LOG_FILE="$tmp/fastsock.log") ;;
    adapter) PRE=(env LD_PRELOAD="$lib" FASTSOCK_TRANSPORTS=vendor,tcp FASTSOCK_LOG=debug
                  FASTSOCK_LOG_FILE="$tmp/fastsock.log") ;;
    rsocket) PRE=(env LD_PRELOAD="$rsocket") ;;
  esac
}

# wait_listener TRANSPORT PORT: until the receiver listens (rsocket's listener is no kernel
# socket: a pause instead).
wait_listener() {
  local i
  if [[ $1 == rsocket ]]; then sleep 1; return; fi
  for ((i = 0; i < 50; i++)); do
    ss -ltn "sport = :$2" | grep -q LISTEN && return
    sleep 0.1
  done
}

# start_tx TRANSPORT PORT OUT CMD...: runs the transmitter CMD (already prefixed) in the
# background (TX_PID); for rsocket, checks a second in that no kernel TCP connection carries
# the port's traffic (rsocket falls back to TCP silently).
start_tx() {
  local t=$1 p=$2 o=$3
  shift 3
  timeout 600 "$@" >"$o" 2>&1 &
  TX_PID=$!
  if [[ $t == rsocket ]]; then
    sleep 1
    local n
    n=$(ss -tnH state established "( dport = :$p or sport = :$p )" | wc -l)
    ((n == 0)) || fail "rsocket: $n kernel TCP connection(s) on port $p: it fell back to TCP"
  fi
}

# check_link TRANSPORT: the run just made went over fastsock's verbs link, or (adapter)
# both ends of a connection were carried by rsocket through the vendor link.
check_link() {
  case $1 in
    fastsock)
      grep -q 'verbs: RDMA connection established' "$tmp/fastsock.log" &&
        grep -q 'verbs: sends on the link' "$tmp/fastsock.log" ||
        fail "fastsock: the connection did not go over verbs: $(grep -m1 'falls back' "$tmp/fastsock.log")" ;;
    adapter)
      (($(grep -c 'carried by vendor (rsocket)' "$tmp/fastsock.log") >= 2)) ||
        fail "adapter: the connection was not carried by rsocket: $(grep -m1 'falls back' "$tmp/fastsock.log")" ;;
    *) return 0 ;;
  esac
  : >"$tmp/fastsock.log"
}

# pipe_run TRANSPORT: fastsock-pipe ping-pong over TRANSPORT, results in $tmp/pipe-T.json.
pipe_run() {
  local t=$1 p=$((port++)) rx
  use "$t"
  "${PRE[@]}" "$pipe" -P "$p" >"$tmp/pipe-$t-rx.out" 2>&1 &
  rx=$!
  wait_listener "$t" "$p"
  start_tx "$t" "$p" "$tmp/pipe-$t-tx.out" "${PRE[@]}" "$pipe" -h "$addr" -P "$p" -u "$upper" \
    -p 0 --trials 3 --trial-time "$trial_time" -q --json "$tmp/pipe-$t.json"
  wait "$TX_PID" || fail "fastsock-pipe over $t: $(tail -2 "$tmp/pipe-$t-tx.out")"
  wait "$rx" || fail "fastsock-pipe receiver over $t exited with $?"
  check_link "$t"
}

# nptcp_run TRANSPORT: prints "LATENCY_US BANDWIDTH_MBIT" of NPtcp over TRANSPORT.
nptcp_run() {
  local t=$1 p=$((port++)) rx
  use "$t"
  (cd "$tmp" && exec "${PRE[@]}" NPtcp -P "$p" -u "$nptcp_upper" -p 0) >"$tmp/np-$t-rx.out" 2>&1 &
  rx=$!
  wait_listener "$t" "$p"
  rm -f "$tmp/np.out"
  start_tx "$t" "$p" "$tmp/np-$t-tx.out" "${PRE[@]}" NPtcp -h "$addr" -P "$p" -u "$nptcp_upper" \
    -p 0 -o "$tmp/np.out"
  wait "$TX_PID" || { fail "NPtcp over $t failed or did not finish in 600 s"; kill "$rx" 2>/dev/null; }
  wait "$rx" 2>/dev/null
  check_link "$t"
  [[ -s $tmp/np.out ]] || { echo "- -"; return; }
  local lat bw
  lat=$(awk '$1 <= 16 { print $3 * 1e6 }' "$tmp/np.out" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.2f", v[int((NR + 1) / 2)]; else print "-" }')
  bw=$(awk 'END { printf "%.1f", $2 }' "$tmp/np.out")
  echo "$lat $bw"
}

# perftest SIZE: "SEND_LAT_US WRITE_BW_MBIT" at SIZE bytes.
perftest() {
  local s=$1 lat bw
  lat=$(bench_perftest "$addr" ib_send_lat -d "$dev" -s "$s" -n "$iters" -F |
        awk -v s="$s" '$1 == s && NF >= 5 { print $5 }')
  bw=$(bench_perftest "$addr" ib_write_bw -d "$dev" -s "$s" -n "$iters" -F |
       awk -v s="$s" '$1 == s && NF >= 4 { printf "%.1f", $4 * 8 * 1.048576 }')
  [[ -n $lat && -n $bw ]] || fail "perftest at $s bytes gave no number"
  echo "${lat:--} ${bw:--}"
}

{
  echo "verbs link vs kernel TCP vs rsocket, Soft-RoCE VM: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: bench/verbs.sh$( ((quick)) && echo ' --quick')   (guest: $(uname -r), $(nproc) vCPUs, device $dev at $addr)"
  echo "fastsock $(git -C "$root" describe --always --dirty 2>/dev/null), rsocket $rsocket"
  echo
  echo "== raw verbs floor (perftest): ib_send_lat typical half round trip, ib_write_bw average"
  printf '%10s %14s %16s\n' bytes send_lat_us write_bw_Mbit
  for s in 2 64 1024 16384 65536; do
    read -r lat bw <<<"$(perftest "$s")"
    printf '%10s %14s %16s\n' "$s" "$lat" "$bw"
  done
  echo
  for t in tcp fastsock adapter rsocket; do pipe_run "$t"; done
  echo "== fastsock-pipe ping-pong (separate runs, sizes 1..$upper, 3 trials each)"
  echo "-- fastsock (B) against kernel TCP (A); regr_% below 0: fastsock faster (less time, more bandwidth)"
  "$pipe" compare "$tmp/pipe-tcp.json" "$tmp/pipe-fastsock.json" --threshold 1000000
  echo "-- fastsock (B) against rsocket (A)"
  "$pipe" compare "$tmp/pipe-rsocket.json" "$tmp/pipe-fastsock.json" --threshold 1000000
  echo "-- fastsock through the rsocket adapter (B) against rsocket's own preload (A)"
  "$pipe" compare "$tmp/pipe-rsocket.json" "$tmp/pipe-adapter.json" --threshold 1000000
  echo "-- fastsock through the rsocket adapter (B) against fastsock's verbs link (A)"
  "$pipe" compare "$tmp/pipe-fastsock.json" "$tmp/pipe-adapter.json" --threshold 1000000
  echo
  echo "== NPtcp (sizes 1..$nptcp_upper): latency = median half round trip of the 1-16 byte rows, bandwidth at $nptcp_upper bytes"
  printf '%10s %12s %16s\n' transport latency_us bandwidth_Mbit
  for t in tcp fastsock adapter rsocket; do
    read -r lat bw <<<"$(nptcp_run "$t")"
    printf '%10s %12s %16s\n' "$t" "$lat" "$bw"
  done
} 2>&1 | tee "$out"
# fastsock-pipe's own results (JSON, with its metadata) next to the table.
mkdir -p "${out%.txt}-json" && cp "$tmp"/pipe-*.json "${out%.txt}-json/" 2>/dev/null
[[ ${PIPESTATUS[0]} -eq 0 ]] || failed=1
grep -q 'verbs.sh: FAIL' "$out" && failed=1
exit "$failed"
