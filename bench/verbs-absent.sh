#!/usr/bin/env bash
# bench/verbs-absent.sh: what the verbs link costs connection setup on a host without an
# RDMA device (issue 6: "connection setup rate unchanged").
#
#   bench/verbs-absent.sh [--quick] [--rounds N] [--out FILE] [--bindir DIR]
#
# (--bindir: where bench_tcp is, default build/bench; FASTSOCK_LIB and FASTSOCK_TOOL name
# the library and the fastsock tool, default under build/.)
# bench_tcp's connect loop (connect/accept/close over loopback, both ends preloaded) runs
# with FASTSOCK_TRANSPORTS=tcp (the foundation's pass-through, bench/overhead.sh's
# "with") and with FASTSOCK_TRANSPORTS=verbs,tcp, interleaved round by round (A/B, then
# B/A, ...) so that drift hits both alike; it prints the median connection rate of each and
# the ratio verbs,tcp / tcp. A round also confirms, from a debug log, that verbs said why it
# did not attach (the probe ran) and that no connection left TCP.
#
# Timings never decide the exit status: 0 when every run produced a valid number, 1 when
# one failed, 2 on a usage error, 77 when the library or bench_tcp is not built or this host
# has an RDMA device (then the measurement is not the one asked for).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/bench_lib.sh"
root=$(cd "$here/.." && pwd)
quick=0 rounds="" out="" bindir=$root/build/bench
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --bindir) bindir=${2:?}; shift ;;
    -h|--help) echo "usage: bench/verbs-absent.sh [--quick] [--rounds N] [--out FILE] [--bindir DIR]"; exit 0 ;;
    *) echo "usage: bench/verbs-absent.sh [--quick] [--rounds N] [--out FILE] [--bindir DIR]" >&2; exit 2 ;;
  esac
  shift
done
lib=${FASTSOCK_LIB:-$root/build/preload/libfastsock.so}
bin=$bindir/bench_tcp
tool=${FASTSOCK_TOOL:-$root/build/tools/fastsock/fastsock}
[[ -f $lib && -x $bin && -x $tool ]] || { echo "verbs-absent.sh: skipped: the build is not there"; exit 77; }
[[ -n $rounds ]] || rounds=$((quick ? 3 : 11))
conns=$((quick ? 300 : 2000))
verbs_row=$(FASTSOCK_TRANSPORTS=verbs,tcp "$tool" info | grep -E '^[[:space:]]+verbs[[:space:]]' || true)
if [[ $(awk '{ print $3 }' <<<"$verbs_row") == yes ]]; then
  echo "verbs-absent.sh: skipped: this host has a usable RDMA device ($verbs_row)"
  exit 77
fi
read -r cpu _ <<<"$(bench_placement_cpus same)"
bench_workdir verbs-absent
suffix=""
((quick)) && suffix=-quick
[[ -n $out ]] || out=$root/bench/results/verbs-absent$suffix.txt

# run CHAIN: one connect-loop run under FASTSOCK_TRANSPORTS=CHAIN; prints its rate.
run() {
  local line
  line=$(env LD_PRELOAD="$lib" FASTSOCK_TRANSPORTS="$1" "$bin" connect --connections "$conns" \
           --batches 5 --cpus "$cpu,$cpu" | grep '^result ') ||
    { echo "verbs-absent.sh: bench_tcp failed under $1" >&2; exit 1; }
  [[ $line == *" preloaded=1"* ]] || { echo "verbs-absent.sh: the library was not loaded" >&2; exit 1; }
  sed -n 's/.* value=\([0-9.]*\) .*/\1/p' <<<"$line"
}

# The probe runs and says why, and nothing leaves TCP (a short logged run).
env LD_PRELOAD="$lib" FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$tmp/log" \
  "$bin" connect --connections 20 --batches 1 >/dev/null
reason=$(grep -m1 ' on tcp (' "$tmp/log" | sed -E 's/.* on tcp \((.*)\)$/\1/' |
         awk -F'; ' '{ for (i = 1; i <= NF; i++) if ($i ~ /^verbs:/) print $i }')
[[ -n $reason ]] ||
  { echo "verbs-absent.sh: the log does not say why verbs did not attach: $(head -3 "$tmp/log")" >&2; exit 1; }
! grep -qE ' on verbs' "$tmp/log" || { echo "verbs-absent.sh: a connection went on verbs" >&2; exit 1; }

{
  echo "verbs link absent (no RDMA device): connection rate, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(bench_machine)"
  echo "command: bench/verbs-absent.sh${suffix/-/ --} --rounds $rounds"
  echo "fastsock info: $(echo $verbs_row)"
  echo "each connection's reason (debug log): $reason"
  echo "bench_tcp connect --connections $conns --batches 5, both ends on CPU $cpu; $rounds interleaved rounds"
  : >"$tmp/samples"
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(tcp verbs,tcp); else order=(verbs,tcp tcp); fi
    for chain in "${order[@]}"; do echo "$chain $(run "$chain")" >>"$tmp/samples"; done
  done
  awk '
    { v[$1, ++n[$1]] = $2 }
    function median(c,   i, j, t, a) {
      for (i = 1; i <= n[c]; i++) a[i] = v[c, i]
      for (i = 1; i <= n[c]; i++) for (j = i + 1; j <= n[c]; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n[c] % 2 ? a[(n[c] + 1) / 2] : (a[n[c] / 2] + a[n[c] / 2 + 1]) / 2
    }
    END {
      a = median("tcp"); b = median("verbs,tcp")
      printf "%-22s %14s\n", "FASTSOCK_TRANSPORTS", "median conn/s"
      printf "%-22s %14.0f\n", "tcp", a
      printf "%-22s %14.0f\n", "verbs,tcp", b
      printf "ratio verbs,tcp / tcp: %.3f\n", b / a
    }' "$tmp/samples"
} | tee "$out"
