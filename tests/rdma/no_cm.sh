#!/usr/bin/env bash
# no_cm.sh (runs in the Soft-RoCE VM): a client whose RDMA connection manager cannot be
# opened although the device is there (/dev/infiniband hidden under an empty tmpfs in the
# client's own mount namespace: /sys still lists rxe0, so the verbs link is tried). The
# service thread opens the channel after the client's first connect() returned
# (docs/verbs.md, "A new process's first connection"): that connection's queued connect
# request must fail with the reason, the next connection must not wait for anything, and
# both echo their bytes intact on TCP with the reason in the log.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_no_cm guest
require_cmd python3 unshare mount
require_library

work=$(mktemp -d /tmp/fastsock-rdma-nocm.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug
cat >"$work/server.py" <<'EOF'
import socket, sys
ls = socket.socket()
ls.bind((sys.argv[1], 0))
ls.listen(8)
print(ls.getsockname()[1], flush=True)
for _ in range(2):
    c, _ = ls.accept()
    while (b := c.recv(65536)):
        c.sendall(b)
    c.close()
EOF
# Each connection echoes 256 KiB; the first one only once the service has said that its
# channel cannot be opened, so that its queued request has failed by then.
cat >"$work/client.py" <<'EOF'
import os, socket, sys, time
host, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
good = 0
for i in range(2):
    s = socket.create_connection((host, port))
    end = time.monotonic() + 20
    while i == 0 and "the RDMA connection manager" not in open(log).read() and time.monotonic() < end:
        time.sleep(0.01)
    data = os.urandom(256 << 10)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while (b := s.recv(65536)):
        got += b
    s.close()
    good += got == data
print(good)
EOF
LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$work/server.log timeout 60 python3 "$work/server.py" \
  "$SOFTROCE_ADDR" >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out"
log=$work/client.log
: >"$log"
out=$(timeout 60 unshare -m sh -c 'mount -t tmpfs none /dev/infiniband && exec "$@"' sh \
  env LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE="$log" python3 "$work/client.py" "$SOFTROCE_ADDR" "$PORT" "$log" 2>&1) ||
  fail "the client failed: $out"
[[ $out == 2 ]] || fail "$out of 2 connections echoed intact"
wait "$server" || fail "the server failed: $(cat "$work/server.out")"
note "2 connections echoed 256 KiB each, intact"

reason='cannot open the RDMA connection manager'
grep -q "verbs: $reason.*connections stay on TCP" "$log" ||
  fail "the service did not say why it has no channel: $(grep verbs "$log" | head -5)"
! grep -q 'carried by verbs' "$log" || fail "a connection is carried by verbs: $(grep verbs "$log")"
mapfile -t fds < <(grep -oE 'debug: fd=[0-9]+ client ' "$log" | grep -oE '[0-9]+')
((${#fds[@]} == 2)) || fail "want 2 client lines in the log: $(grep client "$log")"
first=$(grep -m1 -E 'debug: fd=[0-9]+ client ' "$log")
second=$(grep -E 'debug: fd=[0-9]+ client ' "$log" | tail -1)
# The first: queued while the channel opened, then failed (its fallback line says why);
# or, if the channel had already failed at its connect(), on TCP with the reason at once.
if [[ $first == *"RDMA connection under way"* ]]; then
  grep -q "fd=${fds[0]} falls back to tcp (verbs: $reason" "$log" ||
    fail "the first connection's queued request did not fail with the reason: $(grep verbs "$log")"
  note "first connection: queued while the channel opened, then on TCP: $(grep -m1 "fd=${fds[0]} falls back" "$log" | sed 's/.*debug: //')"
else
  [[ $first == *"$reason"* ]] || fail "the first connection is on TCP for another reason: $first"
  note "first connection: the channel had failed already at its connect(): ${first#*debug: }"
fi
[[ $second == *"on tcp (verbs: $reason"* ]] ||
  fail "the second connection did not stay on TCP at once with the reason: $second"
note "second connection: ${second#*debug: }"
note "PASS"
