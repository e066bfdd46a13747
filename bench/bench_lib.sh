# shellcheck shell=bash
# bench/bench_lib.sh: helpers shared by the benchmark scripts in bench/.
# Sourced, not run.

# "<nproc> CPUs, <model>, kernel <release>"
bench_machine() {
  local model
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  echo "$(nproc) CPUs, ${model:-unknown CPU}, kernel $(uname -r)"
}

bench_cpu_model() {
  local model
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  echo "${model:-unknown}"
}

# Percentage of all CPUs' time spent busy (not idle, not waiting for I/O) during the next
# $1 seconds (default 1). Measured before a run starts, it tells how much other work shares
# the machine: these machines are shared, and a busy one makes every timing noisier.
bench_cpu_busy_pct() {
  local seconds=${1:-1} a b
  a=$(head -1 /proc/stat)
  sleep "$seconds"
  b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    n = split(a, x, " "); split(b, y, " ")
    for (i = 2; i <= n; i++) { d = y[i] - x[i]; total += d; if (i == 5 || i == 6) idle += d }
    printf "%.0f\n", (total > 0 ? 100 * (total - idle) / total : 0)
  }'
}

# A TCP port that no socket uses right now, in any state, taken below the kernel's
# ephemeral range (so no outgoing connection can grab it between this check and the
# server's bind); 20000-32767 unless the ephemeral range starts lower.
bench_free_port() {
  local low high port tries
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  high=$((low > 20000 ? low - 1 : 65535))
  low=$((low > 20000 ? 20000 : 61000))
  for ((tries = 0; tries < 100; tries++)); do
    port=$((low + (RANDOM * 32768 + RANDOM) % (high - low + 1)))
    if ! bench_port_used "$port"; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# True when some TCP socket (any state, IPv4 or IPv6) has local port $1.
bench_port_used() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" '$2 ~ p "$" { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# True when some socket listens on TCP port $1 (any address, IPv4 or IPv6). Reads
# /proc/net/tcp* instead of connecting, because a probe connection would be taken for a
# client by one-shot servers such as `iperf3 -s -1`.
bench_port_listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" '$2 ~ p "$" && $4 == "0A" { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Waits up to $2 seconds (default 10) for a listener on port $1.
bench_wait_listening() {
  local port=$1 deadline=$((SECONDS + ${2:-10}))
  while ((SECONDS < deadline)); do
    bench_port_listening "$port" && return 0
    sleep 0.05
  done
  return 1
}

# Where the two ends of a loopback test run, for placement $1:
#   same   both on one CPU (the last one). On these VMs this is where the scheduler puts a
#          loopback pair anyway, it avoids cross-CPU wake-ups (inter-processor interrupts,
#          which cost tens of microseconds on a virtual machine and vary a lot), and so it
#          gives the steadiest figures and the smallest kernel cost to compare against.
#   cross  server on CPU 0, client on CPU 1 (the usual NetPIPE pinning); needs 2 CPUs.
#   none   no pinning: the scheduler decides.
# Prints "<server cpu> <client cpu>", or nothing for `none`; fails on a bad placement.
bench_placement_cpus() {
  local cpus
  cpus=$(nproc)
  case $1 in
    same) echo "$((cpus - 1)) $((cpus - 1))" ;;
    cross)
      if ((cpus < 2)); then
        echo "placement 'cross' needs 2 CPUs, this machine has $cpus" >&2
        return 1
      fi
      echo "0 1" ;;
    none) ;;
    *) echo "unknown placement '$1' (same, cross or none)" >&2; return 1 ;;
  esac
}

# A readable description of placement $1.
bench_placement_text() {
  local server client
  read -r server client <<<"$(bench_placement_cpus "$1")"
  if [[ -z $server ]]; then
    echo "none (the scheduler decides)"
  else
    echo "$1 (server on CPU $server, client on CPU $client)"
  fi
}

# bench_workdir NAME: a fresh work directory in $tmp for this run, removed at exit together
# with the background server whose pid the script keeps in $server_pid (if any).
bench_workdir() {
  tmp=$(mktemp -d "/tmp/fastsock-$1.XXXXXX")
  server_pid=""
  trap bench_cleanup EXIT
}

# shellcheck disable=SC2317  # (called from the EXIT trap)
bench_cleanup() {
  if [[ -n ${server_pid:-} ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}

# bench_fail SCRIPT MESSAGE...: says what failed, whether the background server still runs,
# and the end of every *.err and *.log in $tmp; exits 1.
bench_fail() {
  local script=$1 f
  shift
  echo "$script: $*" >&2
  if [[ -n ${server_pid:-} ]]; then
    if kill -0 "$server_pid" 2>/dev/null; then
      echo "(the server, pid $server_pid, is still running)" >&2
    else
      echo "(the server, pid $server_pid, has exited)" >&2
    fi
  fi
  for f in "$tmp"/*.err "$tmp"/*.log; do
    [[ -s $f ]] && { echo "--- $(basename "$f"):" >&2; tail -20 "$f" >&2; }
  done
  exit 1
}

# bench_perftest ADDR PROGRAM ARGS...: one perftest measurement (ib_send_lat, ib_write_bw,
# ...): its server with ARGS in the background, then its client with ARGS to ADDR a second
# later; prints the client's output. Each side is bounded to 120 s.
bench_perftest() {
  local addr=$1 prog=$2
  shift 2
  timeout 120 "$prog" "$@" >/dev/null 2>&1 &
  local server=$!
  sleep 1
  timeout 120 "$prog" "$@" "$addr" 2>&1
  wait "$server"
}
