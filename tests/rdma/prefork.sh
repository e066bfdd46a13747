#!/usr/bin/env bash
# prefork.sh (runs in the Soft-RoCE VM): a pre-forking server under the library with the
# verbs link — the parent listens, two forked children accept and echo — and a client that
# makes 4 connections, each sending 1 MiB and reading it back. The RDMA listener, and every
# connect request arriving on it, belongs to the parent: it must redirect each request to
# the child that accepted the connection (docs/verbs.md, fork), so every connection goes
# over verbs in both directions, every byte comes back intact, and no connection stays on
# TCP because its listener was inherited.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_prefork guest
require_cmd python3
require_library

work=$(mktemp -d /tmp/fastsock-rdma-prefork.XXXXXX)
log=$work/fastsock.log
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$log

cat >"$work/server.py" <<'EOF'
import os, signal, socket, sys, time
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], 0))
ls.listen(8)
print(ls.getsockname()[1], flush=True)
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        while True:  # a worker: serves until the parent stops it
            c, _ = ls.accept()
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
            c.close()
    children.append(pid)
# The test says when the client is done (a file): the workers are stopped then.
while not os.path.exists(sys.argv[2]):
    time.sleep(0.1)
for pid in children:
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)
EOF

LD_PRELOAD="$PRELOAD" timeout 120 python3 "$work/server.py" "$SOFTROCE_ADDR" "$work/done" \
  >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out"
port=$PORT
start=$SECONDS
conns=4
# The client waits on each connection until the library carries it over verbs, so that the
# echo is not over before the redirected RDMA connection is up (slow under emulation).
out=$(LD_PRELOAD="$PRELOAD" timeout 120 python3 "$(dirname "$0")/echo_client.py" \
  "$SOFTROCE_ADDR" "$port" "$conns" 1048576 verbs 2>&1) || fail "the client failed: $out"
[[ $out == "$conns" ]] || fail "$out of $conns connections echoed 1 MiB intact"
touch "$work/done"
wait "$server" || fail "the server failed: $(cat "$work/server.out")"
note "$conns connections echoed 1 MiB each, intact, through the forked children in $((SECONDS - start)) s"

! grep -q 'inherited over fork' "$log" || fail "a connection stayed on TCP: $(grep -m1 'inherited over fork' "$log")"
redirects=$(grep -c 'verbs: redirected to RDMA port' "$log")
((redirects == conns)) || fail "want $conns redirected connect requests, got $redirects: $(grep -E 'verbs|redirect' "$log" | head -20)"
# Each client end switched; a child's end switches if its side of the RDMA connection was
# up before its echo was over (counted, not required: the emulated device is slow).
client_pid=$(grep -m1 -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ client ' "$log" | grep -oE '[0-9]+' | head -1)
switched=$(grep -cE "fastsock\[$client_pid\] debug: fd=[0-9]+ verbs: sends on the link" "$log")
switched_all=$(grep -c 'verbs: sends on the link' "$log")
((switched == conns)) || fail "want the client's $conns connections switched to the link, got $switched"
carried=$(grep -c 'carried by verbs' "$log")
((carried == 2 * conns)) || fail "want $((2 * conns)) ends carried by verbs, got $carried"
[[ $(grep -c 'closed sent=1048576 received=1048576' "$log") -eq $((2 * conns)) ]] ||
  fail "want every end closed with 1 MiB each way: $(grep closed "$log")"
ports=$(grep -o 'redirected to RDMA port [0-9]*' "$log" | sort -u | wc -l)
note "$redirects requests redirected (to $ports child port(s)); $switched_all of $((2 * conns)) directions on the link; every end closed with 1 MiB each way"
note "PASS"
