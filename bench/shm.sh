#!/usr/bin/env bash
# bench/shm.sh: the shm link against kernel TCP loopback on this host, in one run.
#
# The same program (bench/bench_tcp) runs without the library (kernel TCP) and with both ends
# under it (the default chain: the connection goes over shm), interleaved round by round so
# that drift on a noisy machine hits both sides alike. Per workload it prints the median of
# each side and the ratio, next to the targets of the shm issue:
#   tcp_pingpong  1-byte half round trip          shm at least 15x lower (and the 0.16 us
#                                                 cache-line floor of design §8 for scale)
#   tcp_bulk      1 GiB in 64 KiB writes          shm at least 2.5x TCP's bandwidth
#   tcp_connect   connect/accept/close loop       shm at least 0.8x TCP's connection rate
# and the CPU an idle shm connection costs: two processes blocked in recv() on each other
# for a few seconds, their CPU time read from /proc.
#
# Timings never decide the exit status: 0 when every run produced a valid number, 1 when a
# program failed, 2 on a usage error, 77 when the library or bench_tcp is not built.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/shm.sh [--quick] [--lib PATH] [--bindir DIR] [--rounds N] [--placement same|cross|none]
EOF
}

command_line="$0 $*"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/bench_lib.sh"
quick=0 lib=${FASTSOCK_LIB:-} bindir="" rounds="" placement=cross
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --lib) lib=${2:?}; shift ;;
    --bindir) bindir=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --placement) placement=${2:?}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
root=$(cd "$here/.." && pwd)
[[ -n $lib ]] || lib=$root/build/preload/libfastsock.so
[[ -n $bindir ]] || bindir=$root/build/bench
[[ -n $rounds ]] || rounds=$((quick ? 1 : 7))
if [[ ! -f $lib || ! -x $bindir/bench_tcp ]]; then
  echo "shm.sh: skipped: $lib or $bindir/bench_tcp not built" >&2
  exit 77
fi
read -r server_cpu client_cpu <<<"$(bench_placement_cpus "$placement")"
cpus=()
[[ -n ${server_cpu:-} ]] && cpus=(--cpus "$server_cpu,$client_cpu")
if ((quick)); then
  declare -A args=([pingpong]="--iterations 200 --batches 3" [bulk]="--bytes 67108864 --batches 3"
                   [connect]="--connections 100 --batches 3")
else
  declare -A args=([pingpong]="" [bulk]="" [connect]="")
fi
bench_workdir shm

# Whether `workload` goes over shm under the library: a short run of it with the debug log
# (which says which link each connection took). The timed runs go without the log: with it,
# each connection's setup writes log lines and looks its local address up, which cost the
# connect loop about a fifth of its rate.
check_shm() {
  local workload=$1 out
  declare -A small=([pingpong]="--iterations 100 --batches 1" [bulk]="--bytes 1048576 --batches 1"
                    [connect]="--connections 20 --batches 1")
  # shellcheck disable=SC2086  # args are word lists
  out=$(env LD_PRELOAD="$lib" FASTSOCK_LOG_FILE="$tmp/log" FASTSOCK_LOG=debug \
    "$bindir/bench_tcp" "$workload" ${small[$workload]} "${cpus[@]}" 2>&1) ||
    { echo "$out" >&2; return 1; }
  grep -q " on shm " "$tmp/log" || { echo "shm.sh: $workload did not go over shm" >&2; return 1; }
  ! grep -qE " (client|server) .* on tcp " "$tmp/log" ||
    { echo "shm.sh: a connection of $workload stayed on TCP:" >&2; grep -E " on tcp " "$tmp/log" | head -3 >&2; return 1; }
  : >"$tmp/log"
}

run() {  # run tcp|shm workload -> prints the value; on failure bench_tcp's output to stderr
  local side=$1 workload=$2 out
  # shellcheck disable=SC2086  # args are word lists
  if [[ $side == shm ]]; then
    out=$(env LD_PRELOAD="$lib" "$bindir/bench_tcp" "$workload" ${args[$workload]} "${cpus[@]}" 2>&1) ||
      { echo "$out" >&2; return 1; }
  else
    out=$(env -u LD_PRELOAD "$bindir/bench_tcp" "$workload" ${args[$workload]} "${cpus[@]}" 2>&1) ||
      { echo "$out" >&2; return 1; }
  fi
  sed -n 's/^result .* value=\([0-9.]*\) .*/\1/p' <<<"$out"
}

echo "# bench/shm.sh: kernel TCP loopback vs shm, $rounds interleaved round(s), placement $(bench_placement_text "$placement")"
echo "# machine: $(bench_machine); CPU busy at start: $(bench_cpu_busy_pct)%"
echo "# command: $command_line"
for workload in pingpong bulk connect; do
  check_shm "$workload" || exit 1
  for ((r = 0; r < rounds; r++)); do
    # A/B then B/A: drift within a round hits both sides alike.
    if ((r % 2 == 0)); then order="tcp shm"; else order="shm tcp"; fi
    for side in $order; do
      v=$(run "$side" "$workload") || { echo "shm.sh: $workload on $side failed" >&2; exit 1; }
      [[ -n $v ]] || { echo "shm.sh: $workload on $side printed no result" >&2; exit 1; }
      echo "$workload $side $v" >>"$tmp/samples"
    done
  done
done

awk '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { v[$1 " " $2] = v[$1 " " $2] " " $3 }
  END {
    printf "%-10s %-22s %12s %12s %8s  %s\n", "workload", "metric", "tcp", "shm", "ratio", "target"
    t = median(v["pingpong tcp"]); s = median(v["pingpong shm"])
    printf "%-10s %-22s %12.3f %12.3f %7.1fx  shm >= 15x lower (floor 0.16 us: shm at %.1fx the floor)\n",
      "pingpong", "half round trip (us)", t, s, t / s, s / 0.16
    t = median(v["bulk tcp"]); s = median(v["bulk shm"])
    printf "%-10s %-22s %12.0f %12.0f %7.2fx  shm >= 2.5x\n", "bulk", "bandwidth (MB/s)", t, s, s / t
    t = median(v["connect tcp"]); s = median(v["connect shm"])
    printf "%-10s %-22s %12.0f %12.0f %7.2fx  shm >= 0.8x\n", "connect", "connections/s", t, s, s / t
  }' "$tmp/samples"

# The CPU an idle shm connection costs: both ends blocked in recv() for a few seconds.
idle_seconds=$((quick ? 1 : 5))
python3 - "$lib" "$idle_seconds" "$tmp/idle.log" <<'EOF'
import os, socket, subprocess, sys, time
lib, seconds, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
code = """
import socket, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.recv(1)
"""
env = dict(os.environ, LD_PRELOAD=lib, FASTSOCK_LOG="debug", FASTSOCK_LOG_FILE=log)
server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, text=True)
port = int(server.stdout.readline())
client_code = f"""
import socket
s = socket.create_connection(("127.0.0.1", {port}))
s.recv(1)
"""
client = subprocess.Popen([sys.executable, "-c", client_code], env=env)
time.sleep(0.5)  # both ends are blocked in recv now
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
before = cpu(server.pid) + cpu(client.pid)
time.sleep(seconds)
after = cpu(server.pid) + cpu(client.pid)
server.kill(); client.kill(); server.wait(); client.wait()
if " on shm " not in open(log).read():
    sys.exit("shm.sh: the idle connection did not go over shm")
print(f"idle       one shm connection, both ends blocked in recv: {1000 * (after - before) / seconds:.2f} ms CPU per second "
      f"(of 1000; clock tick {1000 / os.sysconf('SC_CLK_TCK'):.0f} ms)")
EOF
