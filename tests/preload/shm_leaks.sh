#!/usr/bin/env bash
# shm_leaks.sh: nothing of fastsock's outlives the processes that ran under it, however
# they end: a normal exit after closing (many_conns), an exit with connections and a
# listener still open (hold_conns exit), children killed with SIGKILL mid-transfer
# (fault_kill), and both ends killed with SIGKILL while holding connections (hold_conns
# wait). After each, with every process of that run gone:
#   - no rendezvous record is left: no abstract socket @fastsock/1/<uid>/<addr>:<port> in
#     /proc/net/unix for any port those processes listened on;
#   - nothing new named fastsock* is in /dev/shm except the stats files
#     /dev/shm/fastsock-stats.<pid> (the segments are memfds and never appear there);
#   - no stats file of a process that exited; a process killed with SIGKILL cannot unlink
#     its own (docs/architecture.md, "Stats"): `fastsock stat PID` must report it stale
#     and remove it.
# While hold_conns holds its connections the record, the stats files and one segment
# mapping per connection are checked to be there, so the checks can see what they look for.
source "$(dirname "$0")/lib.sh"

init_test preload_shm_leaks
tool=${FASTSOCK_TOOL:?FASTSOCK_TOOL is not set (run through meson test)}
[[ -x "$tool" ]] || fail "$tool not built"
uid=$(id -u)
shm_before=$(ls /dev/shm)

# A fresh log per way of ending: the pids and ports of that run come from it.
phase_log() { LOG="$WORK/$1.log"; : >"$LOG"; }
pids_of() { sed -nE 's/^fastsock\[([0-9]+)\].*/\1/p' "$WORK/$1.log" | sort -u; }
ports_of() { sed -nE 's/.* listen 127\.0\.0\.1:([0-9]+)$/\1/p' "$WORK/$1.log" | sort -u; }

records_of_port() {
  awk -v want="@fastsock/1/$uid/127.0.0.1:$1" '$NF == want || $NF == want "/v6only"' /proc/net/unix
}

gone() {  # PID has exited and been reaped, or is a zombie
  [[ ! -e /proc/$1 ]] || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]
}

# check_phase NAME KILLED: every process of the run is gone, and left nothing behind;
# KILLED=1 when some were killed with SIGKILL (their stats files are then removed by
# `fastsock stat`).
check_phase() {
  local name=$1 killed=$2 pid port i n=0 stale=0
  local pids ports
  pids=$(pids_of "$name")
  ports=$(ports_of "$name")
  [[ -n "$pids" ]] || fail "$name: the library logged nothing"
  [[ -n "$ports" ]] || fail "$name: no listener in the log"
  for pid in $pids; do
    for ((i = 0; i < 100; i++)); do
      gone "$pid" && break
      sleep 0.05
    done
    gone "$pid" || fail "$name: process $pid is still running"
  done
  for port in $ports; do
    [[ -z "$(records_of_port "$port")" ]] ||
      fail "$name: rendezvous record left for port $port: $(records_of_port "$port")"
  done
  for pid in $pids; do
    [[ -e /dev/shm/fastsock-stats.$pid ]] || continue
    [[ $killed -eq 1 ]] || fail "$name: /dev/shm/fastsock-stats.$pid left by a process that exited"
    "$tool" stat "$pid" >"$WORK/stat-$pid.out" 2>&1 || true
    grep -q 'stale' "$WORK/stat-$pid.out" ||
      fail "$name: fastsock stat $pid did not call its file stale: $(cat "$WORK/stat-$pid.out")"
    [[ ! -e /dev/shm/fastsock-stats.$pid ]] ||
      fail "$name: fastsock stat $pid left /dev/shm/fastsock-stats.$pid"
    stale=$((stale + 1))
  done
  local extra
  extra=$(comm -13 <(sort <<<"$shm_before") <(ls /dev/shm | sort) |
          grep -i fastsock | grep -vE '^fastsock-stats\.[0-9]+$' || true)
  [[ -z "$extra" ]] || fail "$name: new fastsock files in /dev/shm: $extra"
  n=$(wc -w <<<"$pids")
  note "$name: $n processes gone; no record for port(s) $(echo $ports); nothing in /dev/shm" \
       "(stale stats files of killed processes removed by fastsock stat: $stale)"
}

phase_log normal
run_fg normal 60 under_fastsock "$(prog many_conns)"
grep -q '^fastsock: present' "$WORK/normal.out" || fail "many_conns did not load the library"
check_phase normal 0

phase_log open
run_fg open 60 under_fastsock "$(prog hold_conns)" 200 exit
grep -q '^fastsock: present' "$WORK/open.out" || fail "hold_conns did not load the library"
check_phase open 0

phase_log killed
run_fg killed 60 under_fastsock "$(prog fault_kill)"
check_phase killed 1

phase_log held
start_bg held 60 under_fastsock "$(prog hold_conns)" 200 wait
for ((i = 0; i < 300; i++)); do
  grep -q '^ready' "$WORK/held.out" && break
  sleep 0.05
done
grep -q '^ready' "$WORK/held.out" || { cat "$WORK/held.out"; fail "hold_conns wait never got ready"; }
read -r parent child < <(sed -nE 's/^pids: ([0-9]+) ([0-9]+)$/\1 \2/p' "$WORK/held.out")
port=$(ports_of held)
[[ -n "$(records_of_port "$port")" ]] || fail "no record for port $port while it listens"
for pid in "$parent" "$child"; do
  [[ -e /dev/shm/fastsock-stats.$pid ]] || fail "no stats file for the live process $pid"
  maps=$(grep -c '/memfd:fastsock-shm' "/proc/$pid/maps" || true)
  [[ $maps -eq 200 ]] || fail "process $pid maps $maps shm segments, want 200"
done
note "held: while running, the record for port $port, both stats files and 200 segment" \
     "mappings per process are there"
kill -KILL "$parent" "$child"
rc=0
wait_bg held || rc=$?
[[ $rc -eq 137 ]] || { cat "$WORK/held.out"; fail "hold_conns wait ended with status $rc, not by SIGKILL"; }
check_phase held 1
note "PASS"
