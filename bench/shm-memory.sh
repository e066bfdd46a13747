#!/usr/bin/env bash
# bench/shm-memory.sh: what an idle connection costs on the shm link, against kernel TCP
# loopback, in one run.
#
# bench/bench_idle_conns opens N connections between two processes (one byte each way,
# then idle), once without the library (plain TCP: the baseline) and once with both ends
# under it (every connection on shm: checked through the segment mappings), and both
# processes measure themselves with all N open. Printed per connection:
#   shared memory   Pss of the segment mappings summed over both processes (Pss splits a
#                   shared page between its mappers, so the sum is the memory itself)
#   resident, private (RssAnon) and shared (RssShmem), per process
#   descriptors and address space (VmSize), per process
#   kernel Slab — system-wide, so other work on the machine shows up in it (indicative)
# and the time it took to set the N connections up.
# The issue's bound: an idle connection holds at most 64 KiB of shared memory.
# The shm run sets FASTSOCK_FD_BUDGET=0: with the descriptor budget (src/fd_budget.hpp) only
# the connections below half the descriptor limit would be on shm, and the per-connection
# figures are those of shm connections.
#
# Exit status: 0 when both runs completed, every shm-run connection was on shm and the
# shared memory per connection is within 64 KiB; 1 otherwise; 2 on a usage error; 77 when
# the library or bench_idle_conns is not built. Timings never decide it.
set -euo pipefail

usage() {
  echo "usage: bench/shm-memory.sh [--quick] [--connections N] [--lib PATH] [--bindir DIR]"
}

command_line="$0 $*"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/bench_lib.sh"
quick=0 lib=${FASTSOCK_LIB:-} bindir="" n=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --connections) n=${2:?}; shift ;;
    --lib) lib=${2:?}; shift ;;
    --bindir) bindir=${2:?}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
root=$(cd "$here/.." && pwd)
[[ -n $lib ]] || lib=$root/build/preload/libfastsock.so
[[ -n $bindir ]] || bindir=$root/build/bench
[[ -n $n ]] || n=$((quick ? 500 : 10000))
if [[ ! -f $lib || ! -x $bindir/bench_idle_conns ]]; then
  echo "shm-memory.sh: skipped: $lib or $bindir/bench_idle_conns not built" >&2
  exit 77
fi
bench_workdir shm-memory

run() {  # run tcp|shm -> $tmp/SIDE.out (two "usage" lines)
  local side=$1 rc=0
  if [[ $side == shm ]]; then
    timeout -k 5 600 env LD_PRELOAD="$lib" FASTSOCK_LOG=warn FASTSOCK_FD_BUDGET=0 \
      "$bindir/bench_idle_conns" "$n" \
      >"$tmp/$side.out" 2>&1 || rc=$?
  else
    timeout -k 5 600 env -u LD_PRELOAD "$bindir/bench_idle_conns" "$n" \
      >"$tmp/$side.out" 2>&1 || rc=$?
  fi
  if [[ $rc -ne 0 ]] || [[ $(grep -c '^usage ' "$tmp/$side.out") -ne 2 ]]; then
    echo "shm-memory.sh: the $side run failed (status $rc):" >&2
    cat "$tmp/$side.out" >&2
    exit 1
  fi
}

echo "# bench/shm-memory.sh: $n idle connections between two processes, kernel TCP vs shm"
echo "# machine: $(bench_machine); CPU busy at start: $(bench_cpu_busy_pct)%"
echo "# command: $command_line"
run tcp
run shm
awk -v n="$n" '
  # key=before:after -> delta per connection, per role and side
  FNR == 1 { side = FILENAME ~ /shm\.out$/ ? "shm" : "tcp" }
  /^usage / {
    role = ""; for (i = 2; i <= NF; i++) {
      split($i, kv, "="); if (kv[1] == "role") role = kv[2]
    }
    for (i = 2; i <= NF; i++) {
      split($i, kv, "=")
      if (split(kv[2], ba, ":") == 2) { d[side, role, kv[1]] = ba[2] - ba[1]; after[side, role, kv[1]] = ba[2] }
      else v[side, role, kv[1]] = kv[2]
    }
  }
  function per(side, role, key) { return d[side, role, key] / n }
  function row(label, tcp, shm, fmt) { printf "%-52s " fmt " " fmt "\n", label, tcp, shm }
  END {
    maps_ok = after["shm", "server", "seg_maps"] == n && after["shm", "client", "seg_maps"] == n
    shared = (d["shm", "server", "seg_pss"] + d["shm", "client", "seg_pss"]) / n
    printf "%-52s %10s %10s\n", "per connection", "tcp", "shm"
    row("shared memory, KiB (segment Pss, both processes)", 0, shared, "%10.1f")
    row("segment mappings per process", 0, after["shm", "server", "seg_maps"] / n, "%10.2f")
    for (r = 0; r < 2; r++) {
      role = r ? "client" : "server"
      row(role ": private resident (RssAnon), KiB", per("tcp", role, "anon"), per("shm", role, "anon"), "%10.2f")
      row(role ": shared resident (RssShmem), KiB", per("tcp", role, "shmem"), per("shm", role, "shmem"), "%10.2f")
      row(role ": descriptors", per("tcp", role, "fds"), per("shm", role, "fds"), "%10.2f")
      row(role ": address space (VmSize), KiB", per("tcp", role, "vm"), per("shm", role, "vm"), "%10.1f")
    }
    row("kernel Slab, KiB (system-wide, indicative)", per("tcp", "server", "slab"), per("shm", "server", "slab"), "%10.2f")
    row("setup of all connections, s", v["tcp", "server", "setup_s"], v["shm", "server", "setup_s"], "%10.3f")
    printf "totals for %d connections: shared memory %.1f MiB; descriptors %d + %d (tcp: %d + %d); " \
           "private resident %.1f + %.1f MiB (tcp: %.1f + %.1f MiB)\n", n, shared * n / 1024,
           d["shm", "server", "fds"], d["shm", "client", "fds"], d["tcp", "server", "fds"], d["tcp", "client", "fds"],
           d["shm", "server", "anon"] / 1024, d["shm", "client", "anon"] / 1024,
           d["tcp", "server", "anon"] / 1024, d["tcp", "client", "anon"] / 1024
    if (!maps_ok) { printf "FAIL: not every connection was on shm (segment mappings %d and %d, want %d each)\n", after["shm", "server", "seg_maps"], after["shm", "client", "seg_maps"], n; exit 1 }
    if (shared > 64) { printf "FAIL: %.1f KiB of shared memory per idle connection, the bound is 64 KiB\n", shared; exit 1 }
    printf "ok: all %d connections on shm; %.1f KiB of shared memory per idle connection (bound 64 KiB)\n", n, shared
  }' "$tmp/tcp.out" "$tmp/shm.out"
