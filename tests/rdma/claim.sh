#!/usr/bin/env bash
# claim.sh (runs in the Soft-RoCE VM): a connect request that claims someone else's TCP
# connection is refused (docs/verbs.md, Upgrade step 3). A server under the library (verbs
# link) echoes for plain clients (no library: their connections wait for a request that
# never comes from them). claim_forger, plain librdmacm, then sends the verbs link's
# request for such a connection:
#   - from 10.77.0.2, an address added to the VM's interface for the test (a stand-in for
#     another host that guessed the 4-tuple): rejected at once, the server logs why, and
#     the client's connection goes on over TCP, its echo intact;
#   - from 10.77.0.1, the client's own address (the control: the same forger, the request
#     correct in every field the listener can check): accepted. Without it, a forger that
#     could not connect at all would pass the first part.
# Then a client under the library whose socket is bound to 10.77.0.2 before connect(): its
# request must leave from that address, not the one the route picks (10.77.0.1), or the
# server refuses it by the same rule; its connection goes over the link, its echo intact.
#   claim.sh [FORGER]   (default ./claim_forger: meson runs the test in tests/rdma's build
#                        directory, where it is built)
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_claim guest
require_cmd python3 ip
require_library
forger=${1:-$PWD/claim_forger}
[[ -x $forger ]] || fail "no forger program at $forger"

work=$(mktemp -d /tmp/fastsock-rdma-claim.XXXXXX)
log=$work/fastsock.log
fail_details() { echo "--- fastsock log (last 30 lines)"; tail -30 "$log" 2>/dev/null; }
dev=$(ip -o -4 addr show | awk -v a="$SOFTROCE_ADDR/" 'index($4, a) == 1 { print $2; exit }')
[[ -n $dev ]] || fail "no interface has $SOFTROCE_ADDR"
other=10.77.0.2
ip addr add "$other/24" dev "$dev" || fail "cannot add $other to $dev"

cat >"$work/server.py" <<'EOF'
import socket, sys, threading
from pattern_stream import echo
ls = socket.socket()
ls.bind((sys.argv[1], 0))
ls.listen(4)
print(ls.getsockname()[1], flush=True)
for _ in range(3):
    c, _ = ls.accept()
    threading.Thread(target=echo, args=(c,)).start()
EOF
# client.py ADDR PORT GO [SOURCE]: connects (from SOURCE if given), prints its port, and
# once the file GO exists sends 1 MiB in 64 KiB pieces, each read back before the next,
# and says whether it all came back intact.
cat >"$work/client.py" <<'EOF'
import os, socket, sys, time
source = (sys.argv[4], 0) if len(sys.argv) > 4 else None
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), source_address=source)
print(s.getsockname()[1], flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
data = os.urandom(1 << 20)
got = b""
for i in range(0, len(data), 65536):
    s.sendall(data[i:i + 65536])
    while len(got) < i + 65536:
        b = s.recv(65536)
        if not b:
            break
        got += b
s.shutdown(socket.SHUT_WR)
print("echo intact" if got == data and not s.recv(1) else f"echo broken: {len(got)} bytes", flush=True)
EOF

export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)  # pattern_stream.py
env LD_PRELOAD="$PRELOAD" FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$log" \
  timeout 120 python3 "$work/server.py" "$SOFTROCE_ADDR" >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out" server

# connect_client NAME [SOURCE]: a client connects (plain, unless the caller's environment
# preloads the library); CLIENT_PORT is its connection's port as the server sees it (the
# same: no NAT here).
connect_client() {
  timeout 60 python3 "$work/client.py" "$SOFTROCE_ADDR" "$PORT" "$work/go-$1" ${2:-} >"$work/$1.out" 2>&1 &
  wait_until 10 test -s "$work/$1.out" || fail "client $1 did not connect: $(cat "$work/$1.out")"
  CLIENT_PORT=$(head -1 "$work/$1.out")
}

connect_client a
port_a=$CLIENT_PORT
# Bounded: librdmacm's own wait for a connect response can take minutes (its retries), and
# a test that hangs silently says nothing about where.
verdict=$(timeout 30 "$forger" "$other" "$SOFTROCE_ADDR" "$PORT" "$SOFTROCE_ADDR" "$port_a" 2>&1) ||
  [[ $? -ne 124 ]] || fail "the forged request from $other got no answer within 30 s"
[[ $verdict == rejected ]] ||
  fail "a request from $other for $SOFTROCE_ADDR:$port_a's connection: '$verdict', not rejected"
grep -q "refused a connect request from $other:[0-9]* for the connection $SOFTROCE_ADDR:$port_a" "$log" ||
  fail "the server did not log why it refused the request from $other"
note "a request from $other claiming $SOFTROCE_ADDR:$port_a's connection: rejected, the reason logged"

connect_client b
verdict=$(timeout 30 "$forger" "$SOFTROCE_ADDR" "$SOFTROCE_ADDR" "$PORT" "$SOFTROCE_ADDR" "$CLIENT_PORT" 2>&1) ||
  [[ $? -ne 124 ]] || fail "control: the request from the client's own address got no answer within 30 s"
[[ $verdict == accepted ]] ||
  fail "control: the same request from the client's own address: '$verdict', not accepted"
note "control: the same forger from the client's own address is accepted"

touch "$work/go-a"
wait_until 60 grep -q "^echo" "$work/a.out" || fail "client a never finished: $(cat "$work/a.out")"
grep -q "echo intact" "$work/a.out" || fail "client a: $(tail -1 "$work/a.out")"
note "client a's connection went on over TCP, 1 MiB echoed intact"

client_log=$work/client-c.log
LD_PRELOAD="$PRELOAD" FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$client_log" \
  connect_client c "$other"
touch "$work/go-c"
wait_until 60 grep -q "^echo" "$work/c.out" || fail "client c never finished: $(cat "$work/c.out")"
grep -q "echo intact" "$work/c.out" || fail "client c (bound to $other): $(tail -1 "$work/c.out")"
if grep -q "refused a connect request from [^ ]* for the connection $other:$CLIENT_PORT" "$log"; then
  fail "the request of a client bound to $other was refused: it left from another address"
fi
grep -q "verbs: RDMA connection established" "$client_log" &&
  grep -q "verbs: sends on the link after" "$client_log" ||
  fail "client c (bound to $other) did not send over the link; its log: $(tail -5 "$client_log")"
note "a client bound to $other before connect() sends over the link, 1 MiB echoed intact"
# Client b's connection belongs to the forger now: nothing of it is checked.
pkill -f "$work/client.py"
kill "$server" 2>/dev/null
ip addr del "$other/24" dev "$dev"
rm -rf "$work"
