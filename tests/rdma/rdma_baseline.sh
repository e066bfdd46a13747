#!/usr/bin/env bash
# rdma_baseline.sh (runs in the Soft-RoCE VM): the VM's RDMA path carries a real byte stream,
# independently of fastsock's transports. NetPIPE's NPtcp in integrity mode (-i) between two
# processes on $SOFTROCE_ADDR, both under librspreload.so (rsocket, from Debian's librdmacm1),
# which moves AF_INET stream sockets onto RDMA. Checked:
#   - every message size passes NPtcp's integrity check;
#   - no kernel TCP socket on the port ever appears in /proc/net/tcp during the run, and the
#     RDMA device's packet counter grows by at least one packet per message;
#   - the same two checks see the plain kernel TCP run (no rsocket) for what it is: a TCP
#     socket on its port, and (almost) no RDMA packets. So the checks can fail.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_baseline guest
require_cmd NPtcp

rspreload=""
if command -v dpkg >/dev/null 2>&1; then
  rspreload=$(dpkg -L librdmacm1 2>/dev/null | grep -m1 '/librspreload\.so$')
fi
[[ -n $rspreload ]] || rspreload=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
[[ -n $rspreload && -f $rspreload ]] || skip "librspreload.so (librdmacm1) is not installed"

work=$(mktemp -d /tmp/fastsock-rdma-baseline.XXXXXX) || fail "cannot create a work directory"
counter=/sys/class/infiniband/$SOFTROCE_DEV/ports/1/hw_counters/sent_pkts
[[ -r $counter ]] || fail "no packet counter for $SOFTROCE_DEV ($counter)"
opts=(-i -u 65536 -n 2)   # sizes 1 B .. 64 KiB, twice each: ~30 s under TCG

# on_port HEXPORT: /proc/net/tcp has a socket with this local or remote port.
on_port() {
  awk -v p=":$1" 'substr($2, length($2) - 4) == p || substr($3, length($3) - 4) == p { f = 1 }
                  END { exit !f }' /proc/net/tcp
}

# run_np TAG [PRELOAD]: one NPtcp pair on $SOFTROCE_ADDR; sets passed, tcp_seen, pkts.
run_np() {
  local tag=$1 pre=${2:-} port hex rx i c0
  port=$((20000 + RANDOM % 10000))
  hex=$(printf '%04X' "$port")
  c0=$(<"$counter")
  timeout -k 5 90 env ${pre:+LD_PRELOAD=$pre} NPtcp -P "$port" "${opts[@]}" \
    >"$work/$tag-rx.out" 2>&1 &
  rx=$!
  # The receiver prints its buffer sizes just before it binds and listens.
  receiver_ready() {
    grep -q 'Send and receive buffers' "$work/$tag-rx.out" && return 0
    kill -0 "$rx" 2>/dev/null || fail "$tag: the receiver exited: $(cat "$work/$tag-rx.out")"
    return 1
  }
  wait_until 30 receiver_ready || true
  sleep 0.5
  # Sampled before the transmitter starts (the listening socket, for kernel TCP) and while
  # it runs: any socket on the port, listening or connected.
  tcp_seen=0
  on_port "$hex" && tcp_seen=1
  timeout -k 5 90 env ${pre:+LD_PRELOAD=$pre} NPtcp -h "$SOFTROCE_ADDR" -P "$port" "${opts[@]}" \
    -o "$work/$tag-np.out" >"$work/$tag-tx.out" 2>&1 &
  local tx=$! rc_tx=0 rc_rx=0
  while kill -0 "$tx" 2>/dev/null; do
    on_port "$hex" && tcp_seen=$((tcp_seen + 1))
    sleep 0.1
  done
  wait "$tx" || rc_tx=$?
  wait "$rx" || rc_rx=$?
  pkts=$(($(<"$counter") - c0))
  if [[ $rc_tx -ne 0 || $rc_rx -ne 0 ]]; then
    tail -5 "$work/$tag-tx.out" "$work/$tag-rx.out"
    fail "$tag: NPtcp exited with status $rc_tx (transmitter), $rc_rx (receiver)"
  fi
  if grep -qi 'integrity check failed\|error' "$work/$tag-tx.out" "$work/$tag-rx.out"; then
    fail "$tag: NPtcp reported errors: $(grep -hi 'failed\|error' "$work/$tag"-*.out | head -3)"
  fi
  passed=$(grep -c 'Integrity check passed' "$work/$tag-tx.out")
  [[ $passed -gt 10 ]] || fail "$tag: only $passed sizes passed the integrity check"
  note "$tag: $passed sizes passed the integrity check; TCP socket on port $port seen in $tcp_seen samples; $pkts RDMA packets sent"
}

run_np plain
[[ $tcp_seen -gt 0 ]] || fail "plain: /proc/net/tcp never showed the kernel TCP connection: the probe does not work"
plain_pkts=$pkts
run_np rsocket "$rspreload"
[[ $tcp_seen -eq 0 ]] || fail "rsocket: a kernel TCP socket was on the port: rsocket did not carry the stream"
[[ $pkts -ge $passed && $pkts -gt $((plain_pkts + 100)) ]] ||
  fail "rsocket: only $pkts RDMA packets sent for $passed message sizes (plain TCP run: $plain_pkts)"
note "rsocket carried the stream over $SOFTROCE_DEV: no TCP socket, $pkts RDMA packets"
rm -rf "$work"
