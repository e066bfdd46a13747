#!/usr/bin/env bash
# pool.sh (runs in the Soft-RoCE VM): the receive pool a process shares between its verbs
# connections (transports/verbs/verbs_pool.hpp) never lets connections nobody reads starve
# the others. The client opens 50 connections, waits until all are up over RDMA, then sends
# 12 messages' worth (192 KiB) on each of connections 1..49 — 588 pool slots, more than the
# pool's cap of 512 — which the server does not read. Then it sends one byte on connection 0
# and waits for the server's echo: that byte can only arrive if the pool copied the unread
# messages out of its slots (otherwise the sender retries receiver-not-ready for ever: a
# hang). Then the server reads every other connection and checks its bytes exactly.
# Checks from the log: every connection's stream went over the link, the server's pool
# reached its cap (so the unread messages were copied out: nothing else frees a slot).
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_pool guest
require_cmd python3
require_library

work=$(mktemp -d /tmp/fastsock-rdma-pool.XXXXXX)
log=$work/fastsock.log
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$log
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)  # pattern_stream.py
conns=50 bulk=$((192 << 10))

cat >"$work/peer.py" <<'EOF'
# peer.py server ADDR CONNS BULK | client ADDR PORT CONNS BULK LOG: see pool.sh.
import socket, sys, time
from pattern_stream import expected, recv_exact

role, addr = sys.argv[1], sys.argv[2]
if role == "server":
    conns, bulk = int(sys.argv[3]), int(sys.argv[4])
    ls = socket.socket()
    ls.bind((addr, 0))
    ls.listen(conns)
    print(ls.getsockname()[1], flush=True)
    socks = [ls.accept()[0] for _ in range(conns)]
    for s in socks:  # warm-up: one byte each way, so that each direction switches
        s.sendall(recv_exact(s, 1))
    s0 = socks[0]
    s0.sendall(recv_exact(s0, 1))  # the byte behind everyone's unread messages
    print("echoed", flush=True)
    for i, s in enumerate(socks[1:], 1):
        if recv_exact(s, bulk) != expected(i, bulk):
            raise SystemExit(f"connection {i}: the bytes differ")
    print("checked", flush=True)
    recv_exact(s0, 1)
else:
    port, conns, bulk, log = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    socks = [socket.create_connection((addr, port)) for _ in range(conns)]
    deadline = time.time() + 60
    while open(log).read().count("verbs: RDMA connection established") < 2 * conns:
        if time.time() > deadline:
            raise SystemExit("not every connection came up over RDMA in 60 s")
        time.sleep(0.1)
    for s in socks:
        s.sendall(b"w")
        recv_exact(s, 1)
    for i, s in enumerate(socks[1:], 1):
        s.sendall(expected(i, bulk))
    print("sent", flush=True)
    socks[0].sendall(b"x")
    socks[0].settimeout(60)
    if recv_exact(socks[0], 1) != b"x":
        raise SystemExit("connection 0: wrong echo")
    print("echo", flush=True)
    socks[0].sendall(b"e")
EOF

LD_PRELOAD="$PRELOAD" timeout 150 python3 "$work/peer.py" server "$SOFTROCE_ADDR" $conns $bulk \
  >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out" server
LD_PRELOAD="$PRELOAD" timeout 150 python3 "$work/peer.py" client "$SOFTROCE_ADDR" "$PORT" \
  $conns $bulk "$log" >"$work/client.out" 2>&1 ||
  fail "client exited with $? (a hang ends in timeout's 124): $(tail -3 "$work/client.out"; grep -i 'pool' "$log" | tail -5)"
wait "$server" || fail "server exited with $?: $(tail -3 "$work/server.out")"
grep -q '^checked$' "$work/server.out" || fail "the server did not check the bytes: $(cat "$work/server.out")"
switched=$(grep -c 'verbs: sends on the link' "$log")
((switched >= 2 * conns)) || fail "only $switched of $((2 * conns)) directions went over the link"
# At the cap, the unread connections' messages can only have been copied out by the
# service thread (the server's application reads connection 0 alone meanwhile).
grep -q 'the receive pool is at its 512 slots' "$log" ||
  fail "the server's receive pool never reached its cap: $(grep -i 'pool' "$log" | tail -5)"
note "$conns connections, $((conns - 1)) x $((bulk >> 10)) KiB left unread in the pool; the echo behind them came; bytes intact; $switched directions on the link"
note "pool: grew $(grep -c 'the receive pool grew to' "$log") times to its cap; $(grep -c 'runs low' "$log") limit events found it still low after growing"
rm -rf "$work"
