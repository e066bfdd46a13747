#!/usr/bin/env bash
# vendor_rsocket.sh (runs in the Soft-RoCE VM): the vendor link's built-in rsocket profile
# (librdmacm's rsocket, FASTSOCK_TRANSPORTS=vendor,tcp) carrying unmodified programs.
#   - `fastsock info`: the rsocket profile is usable on this host (an RDMA device exists).
#   - NPtcp in integrity mode (-i, messages up to 4 MiB, 3 repetitions) between two processes
#     under the library: every size passes, and both ends of the data connection logged
#     "carried by vendor (rsocket)" (NPtcp's connection lives long enough to switch: the
#     handshake runs beside the first bytes, which go over TCP).
#   - iperf3 for 3 s: both of its connections carried by rsocket, bytes counted.
#   - the chain on an RDMA host (NPtcp, small sizes): verbs,vendor,tcp goes over verbs, and
#     rsocket does not listen next to the verbs listener; shm,verbs,vendor,tcp over shm.
#   - the epoll echo pair of tests/preload (level- then edge-triggered, 3 connections of
#     8 MB each way): every byte echoed (the programs check), and rsocket carried the
#     connections in both processes (a connection whose bytes all went over TCP while its
#     handshake ran is not carried: how many are is timing).
#     Both ends wait for every read and write in epoll_wait, without a timeout, so a lost
#     wake-up hangs the test (rdma-core 44's rpoll lost them after a timed-out rpoll).
#     Three runs of each mode: a client's shutdown() once in about 20 runs slept for good
#     in rshutdown when the application's thread called it (docs/vendor.md, Readiness).
# Every connection goes to the VM's RDMA address: rsocket cannot route 127.0.0.1 over rxe.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_vendor_rsocket guest
require_cmd NPtcp iperf3 python3
require_library
[[ -x ${PROGS_DIR:-}/epoll_echo_server ]] || fail "PROGS_DIR=${PROGS_DIR:-} has no test programs"

work=$(mktemp -d /tmp/fastsock-rdma-vendor.XXXXXX)
log=$work/fastsock.log
export FASTSOCK_TRANSPORTS=vendor,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$log
fail_details() { echo "--- fastsock log (last 30 lines)"; tail -30 "$log" 2>/dev/null; }

reason=$(transport_field vendor reason)
[[ $(transport_field vendor available) == true && $reason == *'rsocket: usable'* ]] ||
  fail "fastsock info: the rsocket profile is not usable here: $reason"
note "fastsock info: vendor $reason"

# listening PORT: waits (up to 30 s) until a server under the library logged its listen on
# PORT. A fixed sleep was not enough under ASan in the VM: NPtcp's transmitter, retrying its
# connect, got in before the receiver's links were ready and stayed off the first link.
listening() {
  wait_until 30 grep -sqE "debug: fd=[0-9]+ listen .*:$1\$" "$log" ||
    fail "no server logged a listen on port $1 within 30 s"
}

# carried: "CONNECTIONS PROCESSES" that logged being carried by the rsocket profile (the
# programs run under timeout, so their pids are not $!).
carried() {
  grep -oE "fastsock\[[0-9]+\] debug: fd=[0-9]+ carried by vendor \(rsocket\)" "$log" |
    awk -F'[][]' '{ n++; p[$2] = 1 } END { printf "%d %d", n, length(p) }'
}

# NPtcp, integrity mode.
(cd "$work" && exec env LD_PRELOAD="$PRELOAD" timeout 240 NPtcp -P 22100 -i -u 4194304 -n 3) \
  >"$work/np-rx.out" 2>&1 &
rx=$!
listening 22100
(cd "$work" && exec env LD_PRELOAD="$PRELOAD" timeout 240 NPtcp -h "$SOFTROCE_ADDR" -P 22100 \
  -i -u 4194304 -n 3 -o "$work/np.out") >"$work/np-tx.out" 2>&1 &
tx=$!
wait "$tx" || fail "NPtcp transmitter exited with $?: $(tail -3 "$work/np-tx.out")"
wait "$rx" || fail "NPtcp receiver exited with $?: $(tail -3 "$work/np-rx.out")"
passed=$(grep -c 'Integrity check passed' "$work/np-tx.out")
bad=$(cat "$work/np-tx.out" "$work/np-rx.out" | grep -ci 'integrity check failed\|error')
((bad == 0)) || fail "NPtcp reported errors: $(grep -i 'failed\|error' "$work"/np-*.out | head -3)"
((passed > 20)) || fail "only $passed sizes passed NPtcp's integrity check"
read -r conns procs <<<"$(carried)"
((conns >= 2 && procs == 2)) ||
  fail "NPtcp's connection was not carried by rsocket at both ends ($conns ends in $procs processes)"
note "NPtcp: $passed sizes passed the integrity check, both ends carried by rsocket"

# iperf3: a control connection and a data connection, both through rsocket.
: >"$log"
env LD_PRELOAD="$PRELOAD" timeout 60 iperf3 -s -1 -p 22101 >"$work/iperf-rx.out" 2>&1 &
rx=$!
listening 22101
env LD_PRELOAD="$PRELOAD" timeout 60 iperf3 -c "$SOFTROCE_ADDR" -p 22101 -t 3 --json \
  >"$work/iperf-tx.json" 2>"$work/iperf-tx.err" &
tx=$!
wait "$tx" || fail "iperf3 client exited with $?: $(tail -3 "$work/iperf-tx.err")"
wait "$rx" || fail "iperf3 server exited with $?: $(tail -3 "$work/iperf-rx.out")"
received=$(python3 -c 'import json, sys
print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"]))' "$work/iperf-tx.json") ||
  fail "iperf3 wrote no result"
((received > 0)) || fail "iperf3 received nothing"
read -r conns procs <<<"$(carried)"
((conns >= 4 && procs == 2)) ||
  fail "iperf3's two connections were not carried by rsocket at both ends ($conns ends in $procs processes)"
note "iperf3: $received bytes in 3 s, control and data connections carried by rsocket"

# The epoll echo pair, to the RDMA address (FASTSOCK_TEST_ADDR replaces 127.0.0.1). The
# programs check the transport right after connect and accept, when a vendor connection is
# still on TCP (it switches once the handshake is done): FASTSOCK_TEST_LINK=tcp.
for mode in lt lt lt et et et; do
  : >"$log"
  rm -f "$work/port"
  env LD_PRELOAD="$PRELOAD" FASTSOCK_TEST_ADDR="$SOFTROCE_ADDR" FASTSOCK_TEST_LINK=tcp \
    "$PROGS_DIR/epoll_echo_server" --mode $mode --conns 3 --port-file "$work/port" \
    >"$work/echo-server.out" 2>&1 &
  rx=$!
  wait_until 10 test -s "$work/port" ||
    fail "epoll echo server ($mode) wrote no port: $(tail -3 "$work/echo-server.out")"
  env LD_PRELOAD="$PRELOAD" FASTSOCK_TEST_ADDR="$SOFTROCE_ADDR" FASTSOCK_TEST_LINK=tcp \
    "$PROGS_DIR/epoll_echo_client" --mode $mode --port "$(cat "$work/port")" --clients 3 \
    --bytes 8000000 >"$work/echo-client.out" 2>&1 &
  tx=$!
  # A stall is reported with both programs' stacks (their threads: the application's and
  # each vendor service's). The programs give up by themselves after 30 s, so the stacks
  # are taken at 25 s, while a stalled pair still waits (gdb detaches: they go on).
  stall=""
  if ! wait_until 25 eval '! running $tx && ! running $rx'; then
    stall=$(backtraces "$tx" "$rx")
    if ! wait_until 95 eval '! running $tx && ! running $rx'; then
      kill -9 "$tx" "$rx" 2>/dev/null
      fail "epoll echo ($mode) did not finish in 120 s: $(tail -3 "$work/echo-client.out")
$stall"
    fi
  fi
  wait "$tx" || fail "epoll echo client ($mode) exited with $?: $(tail -3 "$work/echo-client.out")
$stall"
  wait "$rx" || fail "epoll echo server ($mode) exited with $?: $(tail -3 "$work/echo-server.out")
$stall"
  read -r conns procs <<<"$(carried)"
  ((conns >= 2 && procs == 2)) ||
    fail "epoll echo ($mode): $conns of 6 connection ends carried by rsocket in $procs processes"
  note "epoll echo ($mode): 3 connections of 8 MB echoed, $conns of 6 ends carried by rsocket"
done
# The chain on an RDMA host: the first link that works carries each connection. With
# verbs before vendor, the verbs link listens on the port and rsocket does not try to (it
# would get EADDRINUSE in the same RDMA CM port space); with shm first, shm carries a
# same-host connection (here to 127.0.0.1; to $SOFTROCE_ADDR it would be shm too, as that
# is an address of this host and NPtcp listens on a wildcard, docs/shm-rendezvous.md).
for chain in verbs,vendor,tcp shm,verbs,vendor,tcp; do
  : >"$log"
  want=${chain%%,*} host=$SOFTROCE_ADDR
  [[ $want == shm ]] && host=127.0.0.1
  (cd "$work" && exec env LD_PRELOAD="$PRELOAD" FASTSOCK_TRANSPORTS=$chain timeout 60 \
    NPtcp -P 22102 -u 1024 -n 3) >"$work/chain-rx.out" 2>&1 &
  rx=$!
  listening 22102
  (cd "$work" && exec env LD_PRELOAD="$PRELOAD" FASTSOCK_TRANSPORTS=$chain timeout 60 \
    NPtcp -h "$host" -P 22102 -u 1024 -n 3 -o "$work/chain.out") >"$work/chain-tx.out" 2>&1 ||
    fail "NPtcp ($chain) exited with $?: $(tail -3 "$work/chain-tx.out")"
  wait "$rx" || fail "NPtcp receiver ($chain) exited with $?"
  # A verbs connection starts on tcp while its RDMA connection is made.
  open=$want
  [[ $want == verbs ]] && open='tcp \(verbs: RDMA connection under way\)'
  grep -qE "debug: fd=[0-9]+ client .* on $open( |\$)" "$log" ||
    fail "chain $chain: the connection is not on $want: $(grep -E 'debug: fd=[0-9]+ (client|server) ' "$log" | head -2)"
  grep -q "Address already in use" "$log" && fail "chain $chain: a listener found its port taken: $(grep -m1 'Address already in use' "$log")"
  if [[ $want == verbs ]]; then
    grep -q "carried by verbs" "$log" || fail "chain $chain: no connection was carried by verbs"
    grep -q "no listener through profile rsocket: the verbs link listens on this port" "$log" ||
      fail "chain $chain: rsocket did not step aside for the verbs listener"
  fi
  note "chain $chain: the connection went over $want"
done
rm -rf "$work"
