#!/usr/bin/env bash
# bench/verbs-fork.sh: what fork() costs a process with connections on the verbs link (the
# fork hook moves each to TCP first), for two builds of libfastsock.so in one VM boot, runs
# alternating A and B so that the host's noise falls on both; and the same with the
# connections on kernel TCP (FASTSOCK_TRANSPORTS=tcp, library B) as the baseline. Prints
# the median fork time of each and the ratios.
#
#   bench/verbs-fork.sh [--runs N] [--conns N] [--out FILE] LIB_A LIB_B
#
# LIB_A and LIB_B must lie under the repository (the guest sees only that tree). Exit
# status: 0 when every verbs run had all its connections on the link, 1 otherwise, 2 on a
# usage error, 77 when the VM cannot start. The VM emulates its CPUs (TCG): the shape, not
# what hardware does.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="" in_vm=0 runs=4 conns=32 libs=()
usage() { echo "usage: bench/verbs-fork.sh [--runs N] [--conns N] [--out FILE] LIB_A LIB_B"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    --conns) conns=${2:?}; shift ;;
    --in-vm) in_vm=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) libs+=("$(realpath "$1")") ;;
  esac
  shift
done
((${#libs[@]} == 2)) || { usage >&2; exit 2; }
build=${FASTSOCK_BUILD:-$root/build}
prog=$build/bench/bench_fork_conns
if ((!in_vm)); then
  for l in "${libs[@]}"; do
    [[ -f $l ]] || { echo "verbs-fork.sh: no such library: $l" >&2; exit 2; }
    [[ $l == "$root"/* ]] || { echo "verbs-fork.sh: $l is outside $root (the guest cannot see it)" >&2; exit 2; }
  done
  [[ -x $prog ]] || { echo "verbs-fork.sh: skipped: $prog not built"; exit 77; }
  [[ -n $out ]] || out=$root/bench/results/verbs-fork.txt
  mkdir -p "$(dirname "$out")"
  FASTSOCK_BUILD=$build exec "$root/tests/rdma/run_in_vm.sh" --timeout 1500 --needs-verbs \
    "$here/verbs-fork.sh" --in-vm --runs "$runs" --conns "$conns" --out "$out" "${libs[@]}"
fi

# --- in the guest ---
addr=${SOFTROCE_ADDR:?not in the Soft-RoCE VM}
tmp=$(mktemp -d /tmp/fastsock-bench-fork.XXXXXX)
failed=0 port=22000 rounds=5

# run NAME LIB TRANSPORTS: one bench_fork_conns run; its result line in $tmp/NAME.out.
run() {
  local p=$((port++))
  local tcp_only=()
  [[ $3 == tcp ]] && tcp_only=(tcp)
  FASTSOCK_TRANSPORTS=$3 LD_PRELOAD=$2 timeout 300 "$prog" "$addr" "$p" "$conns" "$rounds" "${tcp_only[@]}" \
    >"$tmp/$1.out" 2>&1 || { echo "verbs-fork.sh: FAIL: run $1: $(tail -2 "$tmp/$1.out")" >&2; failed=1; }
  if [[ $3 != tcp ]] && ! grep -q "linked=$((conns * rounds))\$" "$tmp/$1.out"; then
    echo "verbs-fork.sh: FAIL: run $1 had connections off the link: $(grep result "$tmp/$1.out")" >&2
    failed=1
  fi
}

for r in $(seq "$runs"); do
  run "a-$r" "${libs[0]}" verbs,tcp
  run "b-$r" "${libs[1]}" verbs,tcp
  run "tcp-$r" "${libs[1]}" tcp
done

{
  echo "fork() with $conns connections open, per round: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: bench/verbs-fork.sh --runs $runs --conns $conns A B   (guest: $(uname -r), $(nproc) vCPUs, to $addr)"
  echo "A: ${libs[0]#"$root"/}  B: ${libs[1]#"$root"/}   (fastsock $(git -C "$root" describe --always --dirty 2>/dev/null))"
  echo "bench_fork_conns: $rounds forks per run, each with $conns fresh connections that carried a byte each way; runs alternate A, B, B on TCP"
  python3 - "$tmp" "$runs" "$rounds" <<'PY'
import re, statistics, sys
tmp, runs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = {}
for which in ("a", "b", "tcp"):
    for r in range(1, runs + 1):
        try:
            text = open(f"{tmp}/{which}-{r}.out").read()
        except OSError:
            continue
        t.setdefault(which, []).extend(float(x) for x in re.findall(r"round \d+: .*: ([0-9.]+) us", text))
med = {k: statistics.median(v) for k, v in t.items() if v}
print(f"\nmedian fork time over {runs} runs x {rounds} forks (us):")
for k, name in (("a", "A on verbs"), ("b", "B on verbs"), ("tcp", "B, connections on TCP")):
    if k in med:
        print(f"  {name:24} {med[k]:10.1f}   (min {min(t[k]):.1f}, max {max(t[k]):.1f})")
if "a" in med and "b" in med:
    print(f"B/A: {med['b'] / med['a']:.3f}")
if "tcp" in med and "b" in med:
    print(f"B on verbs / on TCP: {med['b'] / med['tcp']:.2f}")
PY
} >"$out"
cat "$out"
exit $((failed))
