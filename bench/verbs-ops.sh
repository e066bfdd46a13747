#!/usr/bin/env bash
# bench/verbs-ops.sh: what each RDMA operation costs on the Soft-RoCE device, per message
# size: SEND (what the verbs link uses now), RDMA READ (what a zero-copy large message
# would use: the receiver reads the sender's registered buffer) and RDMA WRITE. perftest's
# ib_send_bw, ib_read_bw and ib_write_bw, one after another in one VM boot, to the VM's
# RDMA address. This is the measurement that decides the zero-copy threshold (issue 6:
# "thresholds measured on the device, not guessed"); results in bench/results/verbs-ops.txt
# and docs/verbs.md ("Not done yet").
#
#   bench/verbs-ops.sh [--out FILE]
#
# Exit status: 0 when every run gave its number, 1 when one did not, 77 when the VM cannot
# start. The VM emulates its CPUs (TCG): the shape, not what hardware does.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="" in_vm=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?}; shift ;;
    --in-vm) in_vm=1 ;;
    -h|--help) echo "usage: bench/verbs-ops.sh [--out FILE]"; exit 0 ;;
    *) echo "usage: bench/verbs-ops.sh [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done
if ((!in_vm)); then
  [[ -n $out ]] || out=$root/bench/results/verbs-ops.txt
  mkdir -p "$(dirname "$out")"
  exec "$root/tests/rdma/run_in_vm.sh" --timeout 900 "$here/verbs-ops.sh" --in-vm --out "$out"
fi

# --- in the guest ---
source "$here/bench_lib.sh"
addr=${SOFTROCE_ADDR:?not in the Soft-RoCE VM} dev=${SOFTROCE_DEV:?}
for cmd in ib_send_bw ib_read_bw ib_write_bw; do
  command -v "$cmd" >/dev/null || { echo "verbs-ops.sh: skipped: $cmd missing (perftest)"; exit 77; }
done
iters=200

# bw OP SIZE: average MB/s (perftest's MiB/s column) of OP at SIZE bytes; empty when two
# tries gave no number (a run that reports 0 is taken as failed: one did, once).
bw() {
  local op=$1 s=$2 v try
  for try in 1 2; do
    v=$(bench_perftest "$addr" "$op" -d "$dev" -s "$s" -n "$iters" -F |
        awk -v s="$s" '$1 == s && NF >= 4 && $4 > 0 { printf "%.1f", $4 * 1.048576 }')
    [[ -n $v ]] && break
  done
  echo "${v:-}"
}

failed=0
{
  echo "RDMA operations on Soft-RoCE: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: bench/verbs-ops.sh   (guest: $(uname -r), $(nproc) vCPUs, device $dev at $addr, $iters messages per run)"
  echo "fastsock $(git -C "$root" describe --always --dirty 2>/dev/null)"
  printf '%10s %14s %14s %14s %12s\n' bytes "SEND MB/s" "READ MB/s" "WRITE MB/s" "READ/SEND"
  for s in 4096 16384 65536 262144 1048576 4194304; do
    send=$(bw ib_send_bw "$s") read=$(bw ib_read_bw "$s") write=$(bw ib_write_bw "$s")
    [[ -n $send && -n $read && -n $write ]] || failed=1
    ratio=$(awk -v r="${read:-0}" -v s="${send:-0}" 'BEGIN { if (s > 0) printf "%.2f", r / s; else print "-" }')
    printf '%10s %14s %14s %14s %12s\n' "$s" "${send:--}" "${read:--}" "${write:--}" "$ratio"
  done
} >"$out"
cat "$out"
exit $((failed))
