#!/usr/bin/env bash
# bench/verbs-ab.sh: two builds of libfastsock.so against each other on the verbs link, in one
# VM boot: fastsock-pipe ping-pong of small messages (1 B to --upper), both ends under the
# library, rounds alternating A and B so that the host's noise falls on both. Prints per size
# the median half round trip of each over the rounds, B/A, and B/A per round. For a change
# to the link's data path whose gain is smaller than the noise between VM boots (a few
# percent on a busy host).
#
#   bench/verbs-ab.sh [--rounds N] [--upper BYTES] [--out FILE] LIB_A LIB_B
#
# LIB_A and LIB_B must lie under the repository (the guest sees only that tree): copy the
# build before the change first, e.g. cp build/preload/libfastsock.so build/lib-before.so.
# Exit status: 0 when every run went over the link, 1 otherwise, 2 on a usage error, 77 when
# the VM cannot start. The VM emulates its CPUs (TCG): the shape, not what hardware does.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="" in_vm=0 rounds=4 upper=256 libs=()
usage() { echo "usage: bench/verbs-ab.sh [--rounds N] [--upper BYTES] [--out FILE] LIB_A LIB_B"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --upper) upper=${2:?}; shift ;;
    --in-vm) in_vm=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) libs+=("$(realpath "$1")") ;;
  esac
  shift
done
((${#libs[@]} == 2)) || { usage >&2; exit 2; }
build=${FASTSOCK_BUILD:-$root/build}
pipe=$build/tools/fastsock-pipe/fastsock-pipe
if ((!in_vm)); then
  for l in "${libs[@]}"; do
    [[ -f $l ]] || { echo "verbs-ab.sh: no such library: $l" >&2; exit 2; }
    [[ $l == "$root"/* ]] || { echo "verbs-ab.sh: $l is outside $root (the guest cannot see it)" >&2; exit 2; }
  done
  [[ -x $pipe ]] || { echo "verbs-ab.sh: skipped: $pipe not built"; exit 77; }
  [[ -n $out ]] || out=$root/bench/results/verbs-ab.txt
  mkdir -p "$(dirname "$out")"
  FASTSOCK_BUILD=$build exec "$root/tests/rdma/run_in_vm.sh" --timeout 1500 --needs-verbs \
    "$here/verbs-ab.sh" --in-vm --rounds "$rounds" --upper "$upper" --out "$out" "${libs[@]}"
fi

# --- in the guest ---
addr=${SOFTROCE_ADDR:?not in the Soft-RoCE VM}
command -v ss >/dev/null || { echo "verbs-ab.sh: skipped: ss is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/fastsock-bench-ab.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug
failed=0 port=21000

# run WHICH ROUND: one ping-pong run with library WHICH (0: A, 1: B), JSON in $tmp/WHICH-rROUND.json.
run() {
  local lib=${libs[$1]} p=$((port++)) rx name=$1-r$2
  FASTSOCK_LOG_FILE=$tmp/$name-rx.log LD_PRELOAD=$lib "$pipe" -P "$p" >"$tmp/$name-rx.out" 2>&1 &
  rx=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$p " && break; sleep 0.1; done
  FASTSOCK_LOG_FILE=$tmp/$name-tx.log LD_PRELOAD=$lib timeout 600 "$pipe" -h "$addr" -P "$p" \
    -u "$upper" -p 0 --trials 3 --trial-time 0.1 -q --json "$tmp/$name.json" >"$tmp/$name-tx.out" 2>&1 ||
    { echo "verbs-ab.sh: FAIL: run $name: $(tail -2 "$tmp/$name-tx.out")" >&2; failed=1; }
  wait "$rx" || failed=1
  grep -q 'verbs: sends on the link' "$tmp/$name-tx.log" ||
    { echo "verbs-ab.sh: FAIL: run $name did not go over the link" >&2; failed=1; }
}

for r in $(seq "$rounds"); do
  run 0 "$r"
  run 1 "$r"
done

{
  echo "verbs link, library B against library A: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: bench/verbs-ab.sh --rounds $rounds --upper $upper A B   (guest: $(uname -r), $(nproc) vCPUs, to $addr)"
  echo "A: ${libs[0]#"$root"/}  B: ${libs[1]#"$root"/}   (fastsock $(git -C "$root" describe --always --dirty 2>/dev/null))"
  echo "fastsock-pipe ping-pong -u $upper -p 0, 3 trials of 0.1 s per size; rounds alternate A and B"
  python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
t = {}  # (which, bytes) -> [median half round trip in us, per round]
for which in (0, 1):
    for r in range(1, rounds + 1):
        try:
            d = json.load(open(f"{tmp}/{which}-r{r}.json"))
        except (OSError, ValueError):
            continue
        for s in d["transports"][0]["sizes"]:
            t.setdefault((which, s["bytes"]), []).append(s["t_median"] * 1e6)
print(f"\nmedian half round trip (us), medians of {rounds} rounds; B/A below 1: B faster")
print(f"{'bytes':>8} {'A us':>8} {'B us':>8} {'B/A':>6}  B/A per round")
ratios = []
for b in sorted({b for (_, b) in t}):
    a, bb = t.get((0, b), []), t.get((1, b), [])
    am = statistics.median(a) if a else 0
    bm = statistics.median(bb) if bb else 0
    if am and bm:
        ratios.append(bm / am)
    per = " ".join(f"{y / x:.2f}" for x, y in zip(a, bb) if x)
    print(f"{b:>8} {am:>8.2f} {bm:>8.2f} {bm / am if am else 0:>6.2f}  {per}")
if ratios:
    print(f"median of the sizes' B/A: {statistics.median(ratios):.3f} ({len(ratios)} sizes)")
PY
} >"$out"
cat "$out"
exit $((failed))
