#!/usr/bin/env bash
# prefork.sh (runs in the Soft-RoCE VM): a pre-forking server under the library with the
# verbs link — the parent listens, a forked child accepts and echoes — and a client that
# sends 1 MiB and reads it back. The RDMA listener, and every connect request arriving on it,
# belongs to the parent, so the child's connection cannot go over verbs: it must stay on TCP
# at once with that reason (not wait out the connect time limit under a wrong one), the
# client's end must never switch, and every byte must come back intact.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_prefork guest
require_cmd python3
require_library

work=$(mktemp -d /tmp/fastsock-rdma-prefork.XXXXXX)
log=$work/fastsock.log
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$log

cat >"$work/server.py" <<'EOF'
import os, socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], 0))
ls.listen(4)
print(ls.getsockname()[1], flush=True)
pid = os.fork()
if pid == 0:
    c, _ = ls.accept()
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
EOF

LD_PRELOAD="$PRELOAD" timeout 60 python3 "$work/server.py" "$SOFTROCE_ADDR" >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out"
port=$PORT
start=$SECONDS
out=$(LD_PRELOAD="$PRELOAD" timeout 60 python3 "$(dirname "$0")/echo_client.py" \
  "$SOFTROCE_ADDR" "$port" 1 1048576 2>&1) || fail "the client failed: $out"
[[ $out == 1 ]] || fail "the client's 1 MiB did not come back intact: $out"
wait "$server" || fail "the server failed: $(cat "$work/server.out")"
note "1 MiB echoed intact through the forked child in $((SECONDS - start)) s"

server_line=$(grep -E 'debug: fd=[0-9]+ server .* on ' "$log") || fail "no server line in the log: $(cat "$log")"
[[ $server_line == *" on tcp ("*"the listening socket was inherited over fork"* ]] ||
  fail "want the child's connection on tcp because its listener was inherited: $server_line"
note "server: ${server_line#*debug: }"
# The client's end learns nothing from the parent (which parks the request until its own
# limit), so it may still be connecting when it closes: it must never have switched, and
# its byte counts are the echo's.
grep -qE 'debug: fd=[0-9]+ client .* on (verbs|tcp)' "$log" || fail "no client line in the log"
! grep -q 'verbs: sends on the link' "$log" || fail "an end switched to a link its peer never had"
[[ $(grep -c 'closed sent=1048576 received=1048576' "$log") -eq 2 ]] ||
  fail "want both ends closed with 1 MiB each way: $(grep closed "$log")"
note "client: never switched; both ends closed with 1 MiB each way"
note "PASS"
