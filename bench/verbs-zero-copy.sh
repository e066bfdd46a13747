#!/usr/bin/env bash
# bench/verbs-zero-copy.sh: the verbs link's zero-copy sends against its copy path, in one VM
# boot (docs/verbs.md, "Zero-copy sends"), to find the size from which zero-copy pays: the
# FASTSOCK_VERBS_ZERO_COPY_MIN default. fastsock-pipe ping-pong and streaming from 16 KiB
# (one message) to 4 MiB over the link, integrity checked, both ends under the library;
# rounds alternate zero-copy from 16 KiB and no zero-copy so that the host's noise falls
# on both. Prints, per mode and size, the median bandwidth of each, their ratio (and per
# round), and the transmitter's CPU seconds (user and system: the copy it avoids is user
# time) per round. Results: bench/results/verbs-zero-copy.txt.
#
#   bench/verbs-zero-copy.sh [--rounds N] [--out FILE]
#
# Exit status: 0 when every run finished intact over the link, 1 otherwise, 77 when the VM
# cannot start. The VM emulates its CPUs (TCG): the shape, not what hardware does.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="" in_vm=0 rounds=3
usage() { echo "usage: bench/verbs-zero-copy.sh [--rounds N] [--out FILE]"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --in-vm) in_vm=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
build=${FASTSOCK_BUILD:-$root/build}
lib=$build/preload/libfastsock.so
pipe=$build/tools/fastsock-pipe/fastsock-pipe
if ((!in_vm)); then
  [[ -f $lib && -x $pipe ]] || { echo "verbs-zero-copy.sh: skipped: $lib or $pipe not built"; exit 77; }
  [[ -n $out ]] || out=$root/bench/results/verbs-zero-copy.txt
  mkdir -p "$(dirname "$out")"
  FASTSOCK_BUILD=$build exec "$root/tests/rdma/run_in_vm.sh" --timeout 1500 --needs-verbs \
    "$here/verbs-zero-copy.sh" --in-vm --rounds "$rounds" --out "$out"
fi

# --- in the guest ---
addr=${SOFTROCE_ADDR:?not in the Soft-RoCE VM}
command -v ss >/dev/null || { echo "verbs-zero-copy.sh: skipped: ss is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/fastsock-bench-zc.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug
failed=0 port=21000

# run MODE ZC ROUND: one fastsock-pipe run, ping-pong (MODE pp) or streaming (st), with
# zero-copy from one message on (ZC 1: FASTSOCK_VERBS_ZERO_COPY_MIN=16K) or off (ZC 0); its
# JSON in $tmp/MODE-zZC-rROUND.json, the transmitter's "user system" CPU seconds in .cpu.
run() {
  local mode=$1 zc=$2 r=$3 p=$((port++)) rx name=$1-z$2-r$3 stream=()
  [[ $mode == st ]] && stream=(-s)
  export FASTSOCK_VERBS_ZERO_COPY=$zc FASTSOCK_VERBS_ZERO_COPY_MIN=16K
  FASTSOCK_LOG_FILE=$tmp/$name-rx.log LD_PRELOAD=$lib "$pipe" -P "$p" >"$tmp/$name-rx.out" 2>&1 &
  rx=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$p " && break; sleep 0.1; done
  (
    TIMEFORMAT='%U %S'
    { time FASTSOCK_LOG_FILE=$tmp/$name-tx.log LD_PRELOAD=$lib \
        timeout 600 "$pipe" -h "$addr" -P "$p" -l 16384 -u 4194304 -p 0 -i "${stream[@]}" \
        --trials 3 --trial-time 0.3 -q --json "$tmp/$name.json" >"$tmp/$name-tx.out" 2>&1; } 2>"$tmp/$name.cpu"
  ) || { echo "verbs-zero-copy.sh: FAIL: run $name: $(tail -2 "$tmp/$name-tx.out")" >&2; failed=1; }
  wait "$rx" || failed=1
  grep -q 'verbs: sends on the link' "$tmp/$name-tx.log" ||
    { echo "verbs-zero-copy.sh: FAIL: run $name did not go over the link" >&2; failed=1; }
  local zc_line
  zc_line=$(grep -c 'zero-copy sends from the application' "$tmp/$name-tx.log")
  if ((zc == 1 && zc_line == 0)) || ((zc == 0 && zc_line > 0)); then
    echo "verbs-zero-copy.sh: FAIL: run $name: zero-copy lines: $zc_line" >&2
    failed=1
  fi
}

for r in $(seq "$rounds"); do
  for mode in pp st; do
    run "$mode" 1 "$r"
    run "$mode" 0 "$r"
  done
done

{
  echo "verbs link, zero-copy sends against copies: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: bench/verbs-zero-copy.sh --rounds $rounds   (guest: $(uname -r), $(nproc) vCPUs, to $addr)"
  echo "fastsock $(git -C "$root" describe --always --dirty 2>/dev/null)"
  echo "fastsock-pipe -l 16384 -u 4194304 -p 0 -i (integrity), 3 trials of 0.3 s per size, ping-pong"
  echo "and streaming (-s); zero-copy runs with FASTSOCK_VERBS_ZERO_COPY_MIN=16K (every full"
  echo "16 KiB message), copy runs with FASTSOCK_VERBS_ZERO_COPY=0; rounds alternate them"
  python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
for mode, title in (("pp", "ping-pong"), ("st", "streaming")):
    bw = {}  # (zc, bytes) -> [Mbit/s per round]
    for zc in (1, 0):
        for r in range(1, rounds + 1):
            try:
                d = json.load(open(f"{tmp}/{mode}-z{zc}-r{r}.json"))
            except (OSError, ValueError):
                continue
            for s in d["transports"][0]["sizes"]:
                bw.setdefault((zc, s["bytes"]), []).append(s["mbps_avg"])
    print(f"\n{title}: medians of {rounds} rounds")
    print(f"{'bytes':>10} {'zero-copy Mbit/s':>17} {'copy Mbit/s':>12} {'zc/copy':>8}  {'zc/copy per round':>20}")
    for b in sorted({b for (_, b) in bw}):
        z, c = bw.get((1, b), []), bw.get((0, b), [])
        zm = statistics.median(z) if z else 0
        cm = statistics.median(c) if c else 0
        ratio = f"{zm / cm:.2f}" if zm and cm else "-"
        per = " ".join(f"{a / b2:.2f}" for a, b2 in zip(z, c) if b2)
        print(f"{b:>10} {zm:>17.1f} {cm:>12.1f} {ratio:>8}  {per:>20}")
    for zc in (1, 0):
        cpu = []
        for r in range(1, rounds + 1):
            try:
                cpu.append(open(f"{tmp}/{mode}-z{zc}-r{r}.cpu").read().split())
            except OSError:
                pass
        label = "zero-copy" if zc else "copy"
        print(f"transmitter CPU seconds (user system), {label}: " + "; ".join(" ".join(c) for c in cpu))
PY
  echo
  for r in $(seq "$rounds"); do
    for mode in pp st; do
      grep -ohE '[0-9]+ bytes sent zero-copy.*' "$tmp/$mode-z1-r$r-tx.log" | tail -1 | sed "s/^/round $r $mode: /"
    done
  done
} >"$out"
cat "$out"
exit $((failed))
