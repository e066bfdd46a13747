#!/usr/bin/env bash
# bench/verbs-inline.sh: up to which message size an inline send (the bytes copied into the
# work request, no DMA read of a registered buffer) is faster than a plain one on the
# Soft-RoCE device: perftest's ib_send_lat per size with -I SIZE (inline) and -I 0, rounds
# alternating, in one VM boot. This is the measurement behind the verbs link's inline
# limit (transports/verbs/verbs_conn.cc, kMaxInline; docs/verbs.md, "Inline sends").
# Results: bench/results/verbs-inline.txt.
#
#   bench/verbs-inline.sh [--rounds N] [--out FILE]
#
# Exit status: 0 when every run gave its number, 1 when one did not, 77 when the VM cannot
# start. The VM emulates its CPUs (TCG): the shape, not what hardware does.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="" in_vm=0 rounds=3
usage() { echo "usage: bench/verbs-inline.sh [--rounds N] [--out FILE]"; }
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
if ((!in_vm)); then
  [[ -n $out ]] || out=$root/bench/results/verbs-inline.txt
  mkdir -p "$(dirname "$out")"
  exec "$root/tests/rdma/run_in_vm.sh" --timeout 900 "$here/verbs-inline.sh" --in-vm \
    --rounds "$rounds" --out "$out"
fi

# --- in the guest ---
source "$here/bench_lib.sh"
addr=${SOFTROCE_ADDR:?not in the Soft-RoCE VM} dev=${SOFTROCE_DEV:?}
command -v ib_send_lat >/dev/null || { echo "verbs-inline.sh: skipped: ib_send_lat missing (perftest)"; exit 77; }
iters=2000
sizes=(8 32 64 128 192 256 320 384)
tmp=$(mktemp -d /tmp/fastsock-bench-inline.XXXXXX)

# lat SIZE INLINE: ib_send_lat's typical (median) half round trip in µs, or empty when two
# tries gave no number (a device that cannot inline that much refuses the queue pair).
lat() {
  local s=$1 inl=$2 v try
  for try in 1 2; do
    v=$(bench_perftest "$addr" ib_send_lat -d "$dev" -s "$s" -I "$inl" -n "$iters" -F |
        awk -v s="$s" '$1 == s && NF >= 5 && $5 > 0 { print $5 }')
    [[ -n $v ]] && break
  done
  echo "${v:-}"
}

failed=0
for r in $(seq "$rounds"); do
  for s in "${sizes[@]}"; do
    for inl in "$s" 0; do
      v=$(lat "$s" "$inl")
      [[ -n $v ]] || failed=1
      echo "$s $inl $v" >>"$tmp/runs"
    done
  done
done

{
  echo "Inline sends on Soft-RoCE: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "command: bench/verbs-inline.sh --rounds $rounds   (guest: $(uname -r), $(nproc) vCPUs, device $dev at $addr)"
  echo "fastsock $(git -C "$root" describe --always --dirty 2>/dev/null)"
  echo "ib_send_lat -s SIZE -I SIZE (inline) against -I 0, $iters round trips per run, typical (median)"
  echo "half round trip in µs; medians of $rounds rounds, and inline/plain per round"
  awk -v rounds="$rounds" '
    function median(list, n,   i, j, t, a) {
      n = split(list, a, " ")
      for (i = 1; i <= n; i++) a[i] += 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      if (n == 0) return 0
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    NF == 3 {
      if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
      if ($2 > 0) inl[$1] = inl[$1] " " $3; else plain[$1] = plain[$1] " " $3
    }
    NF == 2 { failed++ }
    END {
      printf "%8s %12s %12s %14s   %s\n", "bytes", "inline µs", "plain µs", "inline/plain", "per round"
      for (k = 1; k <= n; k++) {  # the sizes in the order run
        s = order[k]; mi = median(inl[s]); mp = median(plain[s])
        split(inl[s], a, " "); split(plain[s], b, " "); per = ""
        for (i = 1; i in a && i in b; i++) per = per sprintf(" %.2f", (b[i] > 0 ? a[i] / b[i] : 0))
        printf "%8s %12.2f %12.2f %14s  %s\n", s, mi, mp, (mp > 0 && mi > 0 ? sprintf("%.2f", mi / mp) : "-"), per
      }
      if (failed) printf "%d runs gave no number (0.00 above: none did)\n", failed
    }' "$tmp/runs"
} >"$out"
cat "$out"
exit $((failed))
