#!/usr/bin/env bash
# wildcard_local.sh: a client connecting to a non-loopback address of this host finds a
# wildcard listener's rendezvous record (docs/shm-rendezvous.md, "Which records a connector
# tries"), and no other address does.
#
# Runs in a network namespace of its own (`unshare -rn`; skipped when that is not
# permitted or unshare/ip are missing) with 10.123.0.1/24 and fd00:123::1/64 on lo, both
# ends under the library (progs/addr_echo.c checks every byte of the echo):
#   - server on 0.0.0.0, client to 10.123.0.1: on shm
#   - server on [::] (dual-stack), clients to 10.123.0.1 and [fd00:123::1]: on shm
#   - server on [::] (IPv6 only) and a plain server on 0.0.0.0, same port: the IPv6 client
#     on shm; the IPv4 client reaches the plain server on tcp (no v6only record for IPv4)
#   - server on 127.0.0.1 only: a client to 127.0.0.1 on shm (the record exists), one to
#     10.123.0.1 refused by the kernel, nothing on shm (no false match)
#   - server on 0.0.0.0, client to 10.123.0.2 (inside lo's local 10.123.0.0/24, reaches
#     this host, but not an address of it: its route names 10.123.0.1 as source): tcp,
#     with the reason (the proof is exact, never broader)
#   - another host: a second namespace behind a veth pair (10.124.0.2) runs a plain server
#     on 0.0.0.0:P, and this one a fastsock server on 0.0.0.0:P as bait: the client to
#     10.124.0.2:P reaches the other host on tcp, with the reason, and the bait gets nothing
source "$(dirname "$0")/lib.sh"

if [[ ${FASTSOCK_WILDCARD_NETNS:-0} != 1 ]]; then
  TEST_NAME=wildcard_local  # (init_test sets it; skip needs it before)
  require_cmd unshare ip
  err=$(unshare -rn true 2>&1) ||
    skip "cannot make a network namespace here (unshare -rn: ${err:-not permitted})"
  exec unshare -rn env FASTSOCK_WILDCARD_NETNS=1 bash "$0" "$@"
fi

init_test wildcard_local
echo_bin=$(prog addr_echo)
[[ -x $echo_bin ]] || fail "$echo_bin not built"

ip link set lo up || skip "cannot bring lo up in the namespace"
ip addr add 10.123.0.1/24 dev lo || skip "cannot add 10.123.0.1/24 to lo in the namespace"
v6=1
if ! ip -6 addr add fd00:123::1/64 dev lo nodad 2>"$WORK/ip6.err"; then
  v6=0
  note "IPv6 cases skipped: cannot add fd00:123::1/64 to lo: $(cat "$WORK/ip6.err")"
fi
note "namespace: $(ip -br addr show dev lo | tr -s ' ')"

# start_server NAME ARGS...: an addr_echo server in the background; sets PORT.
start_server() {
  local name=$1
  shift
  rm -f "$WORK/$name.port"
  start_bg "$name" 60 "$@" --port-file "$WORK/$name.port"
  wait_for_file "$WORK/$name.port" 15 "$BG_PID"
  PORT=$(cat "$WORK/$name.port")
}

# client NAME [under_fastsock|without_fastsock] ARGS...: an addr_echo client, which must
# exit 0; then the log expectations it printed must hold.
client() {
  local name=$1 wrap=$2
  shift 2
  run_fg "$name" 30 "$wrap" "$echo_bin" client "$@"
  [[ $wrap == without_fastsock ]] || check_expectations "$WORK/$name.out"
}

# server_done NAME: the server exited 0 and its log expectations hold.
server_done() {
  expect_bg_ok "$1"
  check_expectations "$WORK/$1.out"
}

# The namespace carries plain TCP to its own address (baseline, no library).
start_server plain-server without_fastsock "$echo_bin" server --bind 0.0.0.0 --conns 1
client plain-client without_fastsock --connect 10.123.0.1 --port "$PORT" --bytes 70000
server_done plain-server
note "without the library: 10.123.0.1 echoes over TCP"

# 1. 0.0.0.0 listener, client to this host's 10.123.0.1.
start_server v4-server under_fastsock "$echo_bin" server --bind 0.0.0.0 --conns 1 --expect link
client v4-client under_fastsock --connect 10.123.0.1 --port "$PORT" --bytes 300000 \
  --seed 2 --expect link
server_done v4-server
grep -qE "debug: fd=[0-9]+ client 10\.123\.0\.1:[0-9]+ -> 10\.123\.0\.1:$PORT on $OPEN_LINK" "$LOG" ||
  fail "no 'client 10.123.0.1:N -> 10.123.0.1:$PORT on $LINK' line"
note "0.0.0.0 listener: a client to 10.123.0.1 is on $LINK"

# 2. [::] dual-stack listener: the IPv4 address and the IPv6 one.
conns=1
[[ $v6 == 1 ]] && conns=2
start_server dual-server under_fastsock "$echo_bin" server --bind :: --v6only 0 \
  --conns "$conns" --expect link
client dual-client-v4 under_fastsock --connect 10.123.0.1 --port "$PORT" --bytes 123457 \
  --seed 3 --expect link
[[ $v6 == 1 ]] && client dual-client-v6 under_fastsock --connect fd00:123::1 --port "$PORT" \
  --bytes 65537 --seed 4 --expect link
server_done dual-server
if [[ $v6 == 1 ]]; then
  note "[::] dual-stack listener: clients to 10.123.0.1 and [fd00:123::1] are on $LINK"
else
  note "[::] dual-stack listener: a client to 10.123.0.1 is on $LINK"
fi

# 3. [::] IPv6-only listener beside a plain 0.0.0.0 one on the same port.
if [[ $v6 == 1 ]]; then
  start_server v6only-server under_fastsock "$echo_bin" server --bind :: --v6only 1 \
    --conns 1 --expect link
  start_server v4-plain-server without_fastsock "$echo_bin" server --bind 0.0.0.0 \
    --port "$PORT" --conns 1
  client v6only-client-v6 under_fastsock --connect fd00:123::1 --port "$PORT" --bytes 50000 \
    --seed 5 --expect link
  client v6only-client-v4 under_fastsock --connect 10.123.0.1 --port "$PORT" --bytes 50001 \
    --seed 6 --expect tcp
  server_done v6only-server
  server_done v4-plain-server
  grep -qE "debug: fd=[0-9]+ client 10\.123\.0\.1:[0-9]+ -> 10\.123\.0\.1:$PORT on tcp \(shm: no fastsock listener" "$LOG" ||
    fail "the IPv4 client beside an IPv6-only listener did not stay on tcp for want of a listener"
  note "[::] IPv6-only listener: the IPv6 client is on $LINK, the IPv4 one reaches the plain 0.0.0.0 server on tcp"
fi

# 4. A loopback-only listener: found from 127.0.0.1, never from 10.123.0.1.
start_server lo-server under_fastsock "$echo_bin" server --bind 127.0.0.1 --conns 1 --expect link
client lo-client-refused under_fastsock --connect 10.123.0.1 --port "$PORT" --expect refused
client lo-client under_fastsock --connect 127.0.0.1 --port "$PORT" --bytes 1000 --seed 7 \
  --expect link
server_done lo-server
note "127.0.0.1 listener: 10.123.0.1 refused (no false match), 127.0.0.1 on $LINK"

# 5. An address in lo's local range that is not the host's own: not proven, tcp.
not_ours="destination is not an address of this host"
start_server range-server under_fastsock "$echo_bin" server --bind 0.0.0.0 --conns 1 --expect tcp
client range-client under_fastsock --connect 10.123.0.2 --port "$PORT" --bytes 40000 \
  --seed 8 --expect tcp
server_done range-server
grep -qE "debug: fd=[0-9]+ client 10\.123\.0\.1:[0-9]+ -> 10\.123\.0\.2:$PORT on tcp \(shm: $not_ours" "$LOG" ||
  fail "no 'client ... -> 10.123.0.2:$PORT on tcp (shm: $not_ours' line"
note "10.123.0.2 (local range, not an address of this host): tcp, with the reason"

# 6. Another host behind a veth pair, with a fastsock bait listener on the same port here.
other_ns_case() {
  local ypid="" i ns
  start_bg other-host 60 without_fastsock unshare -n sleep 60
  for ((i = 0; i < 100; i++)); do
    ypid=$(awk '{print $1}' "/proc/$BG_PID/task/$BG_PID/children" 2>/dev/null)
    # An empty readlink (a process going away) is no proof of another namespace.
    ns=$(readlink "/proc/$ypid/ns/net" 2>/dev/null) || ns=""
    [[ -n $ypid && -n $ns && $ns != $(readlink /proc/self/ns/net) ]] && break
    ypid=""
    sleep 0.05
  done
  [[ -n $ypid ]] || { note "another-host case skipped: no second namespace"; return 0; }
  if ! ip link add vx type veth peer name vy netns "$ypid" 2>"$WORK/veth.err"; then
    note "another-host case skipped: cannot make a veth pair: $(cat "$WORK/veth.err")"
    return 0
  fi
  { ip addr add 10.124.0.1/24 dev vx && ip link set vx up; } || fail "cannot set vx up"
  nsenter -t "$ypid" -n sh -c 'ip link set lo up && ip addr add 10.124.0.2/24 dev vy &&
    ip link set vy up' ||
    fail "cannot set vy up in the other namespace (pid $ypid, $(readlink "/proc/$ypid/ns/net" 2>&1), here $(readlink /proc/self/ns/net); its links: $(nsenter -t "$ypid" -n ip -br link 2>&1 | tr '\n' ' '); ours: $(ip -br link | tr '\n' ' '))"
  start_server remote-server without_fastsock nsenter -t "$ypid" -n "$echo_bin" server \
    --bind 0.0.0.0 --conns 1
  local port=$PORT
  start_server bait-server under_fastsock "$echo_bin" server --bind 0.0.0.0 --port "$port" \
    --conns 0
  client remote-client under_fastsock --connect 10.124.0.2 --port "$port" --bytes 200000 \
    --seed 9 --expect tcp
  server_done remote-server
  grep -q "10.124.0.2:$port <- 10.124.0.1:.*: 200000 bytes echoed" "$WORK/remote-server.out" ||
    fail "the other host's server did not echo the client's 200000 bytes"
  grep -qE "debug: fd=[0-9]+ client 10\.124\.0\.1:[0-9]+ -> 10\.124\.0\.2:$port on tcp \(shm: $not_ours" "$LOG" ||
    fail "no 'client ... -> 10.124.0.2:$port on tcp (shm: $not_ours' line"
  ! grep -q "connection" "$WORK/bait-server.out" ||
    fail "the bait listener here accepted a connection: $(grep connection "$WORK/bait-server.out")"
  note "another host (10.124.0.2): tcp to that host, with the reason; the wildcard listener here got nothing"
}
other_ns_case

log_assert_no_errors
note "PASS"
