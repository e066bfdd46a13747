#!/usr/bin/env bash
# kill.sh (runs in the Soft-RoCE VM): kill -9 of either end of a connection carried over
# verbs. Both ends run under the library with FASTSOCK_TRANSPORTS=verbs,tcp; the connection
# must be established over RDMA and switched before the kill. Three situations:
#   c2s    the client streams a byte pattern to the server; the client is killed,
#   s2c    the server streams to the client; the server is killed,
#   quiet  the client sends 10 bytes and goes quiet; the server, blocked in recv, sees the
#          client killed.
# The survivor must see end of stream or ECONNRESET within 15 s (never a hang or a crash),
# and every byte it received must be the pattern, in order.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_kill guest
require_cmd python3
require_library

work=$(mktemp -d /tmp/fastsock-rdma-kill.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug

cat >"$work/peer.py" <<'EOF'
# peer.py server ADDR MODE | client ADDR PORT MODE: see kill.sh.
import socket, sys, time
from pattern_stream import PATTERN, accept_one, receive, stream_until
role, addr, mode = sys.argv[1], sys.argv[2], sys.argv[-1]

if role == "server":
    s = accept_one(addr)
    if mode == "s2c":
        stream_until(s, None)  # the victim: the pattern, for ever
    else:  # the survivor: checks the pattern, says when it may be killed
        receive(s, 10 if mode == "quiet" else 2 << 20)
else:
    s = socket.create_connection((addr, int(sys.argv[3])))
    if mode == "c2s":
        stream_until(s, None)
    elif mode == "quiet":
        s.sendall(PATTERN[:10])
        time.sleep(120)
    else:
        receive(s, 2 << 20)
EOF
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)  # pattern_stream.py

pids=""
trap 'kill -9 $pids 2>/dev/null' EXIT

# scenario MODE: runs one situation; the victim is the streaming (or quiet) end.
scenario() {
  local mode=$1 log=$work/$1.log port server client survivor victim out i start
  export FASTSOCK_LOG_FILE=$log
  # No `timeout` wrapper: the pid must be python's own, the process that is killed.
  LD_PRELOAD="$PRELOAD" python3 "$work/peer.py" server "$SOFTROCE_ADDR" "$mode" \
    >"$work/$mode-server.out" 2>&1 &
  server=$!
  server_port "$work/$mode-server.out" "$mode"
  port=$PORT
  LD_PRELOAD="$PRELOAD" python3 "$work/peer.py" client "$SOFTROCE_ADDR" "$port" "$mode" \
    >"$work/$mode-client.out" 2>&1 &
  client=$!
  pids="$server $client"
  if [[ $mode == s2c ]]; then
    survivor=$client victim=$server out=$work/$mode-client.out
  else
    survivor=$server victim=$client out=$work/$mode-server.out
  fi
  for ((i = 0; i < 600; i++)); do grep -q threshold "$out" && break; sleep 0.1; done
  grep -q threshold "$out" || fail "$mode: the survivor never got its bytes: $(cat "$out")"
  # The link carries the stream: established over RDMA and switched (the quiet client's 10
  # bytes may go on TCP before the link is up: then wait until it is up).
  for ((i = 0; i < 100; i++)); do
    [[ $(grep -c 'verbs: RDMA connection established' "$log") -ge 2 ]] && break
    sleep 0.1
  done
  [[ $(grep -c 'verbs: RDMA connection established' "$log") -ge 2 ]] ||
    fail "$mode: the connection is not up over RDMA: $(cat "$log")"
  [[ $mode == quiet ]] || grep -q 'verbs: sends on the link' "$log" ||
    fail "$mode: the stream did not go over the link: $(cat "$log")"
  kill -9 "$victim"
  start=$SECONDS
  for ((i = 0; i < 150; i++)); do grep -q '^end ' "$out" && break; sleep 0.1; done
  local end
  end=$(grep '^end ' "$out") || {
    kill -9 "$survivor" 2>/dev/null
    fail "$mode: the survivor did not see the death within 15 s (a hang): $(tail -3 "$out")"
  }
  [[ $end =~ ^end\ (eof|reset)\ total=[0-9]+\ ok=True$ ]] ||
    fail "$mode: the survivor reported: $end (want eof or reset, the pattern intact)"
  wait "$survivor" || fail "$mode: the survivor exited with $?: $(cat "$out")"
  wait "$victim" 2>/dev/null
  note "$mode: killed the $([[ $victim == "$server" ]] && echo server || echo client); the survivor: $end, after $((SECONDS - start)) s"
}

scenario c2s
scenario s2c
scenario quiet
note "PASS"
