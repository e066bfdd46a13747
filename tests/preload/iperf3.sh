#!/usr/bin/env bash
# iperf3.sh: an iperf3 server (-1: one test, then exit) and client (-t 2) with --json
# output: first both under the library, then only the client, then only the server. Every
# run: the transfer must move data and the server's and the client's reports must agree.
# Both ends under the library: the log shows the control and data connections on the link
# with byte counts at least as large as iperf3's own. One end alone: every connection
# stays on TCP with the reason.
source "$(dirname "$0")/lib.sh"
init_test iperf3
require_cmd iperf3
py=/usr/bin/python3
[[ -x $py ]] || skip "$py is not installed"
require_preload_prefix_ok iperf3 --version

# Bytes still in flight when the test ends are at most a full send buffer plus a full
# receive buffer.
inflight=$(($(awk '{print $3}' /proc/sys/net/ipv4/tcp_wmem) + $(awk '{print $3}' /proc/sys/net/ipv4/tcp_rmem)))

# iperf3_run MODE: MODE as in set_ends; checks iperf3's two reports and sets port, sent
# and received.
iperf3_run() {
  local mode=$1 report
  set_ends "$mode"
  port=$(free_port)
  start_bg "$mode-server" 60 $SERVER_WRAP iperf3 -s -1 -p "$port" --json \
    --logfile "$WORK/$mode-server.json"
  wait_for_port "$port" 15 "$BG_PID"
  run_fg "$mode-client" 60 $CLIENT_WRAP iperf3 -c 127.0.0.1 -p "$port" -t 2 --json \
    --logfile "$WORK/$mode-client.json"
  expect_bg_ok "$mode-server"
  report=$($py - "$WORK/$mode-client.json" "$WORK/$mode-server.json" "$inflight" 2>&1 <<'PY'
import json, sys
client = json.load(open(sys.argv[1]))
server = json.load(open(sys.argv[2]))
inflight = int(sys.argv[3])
for name, doc in (("client", client), ("server", server)):
    if "error" in doc:
        sys.exit(f"{name} reported an error: {doc['error']}")
sent = client["end"]["sum_sent"]["bytes"]
received = client["end"]["sum_received"]["bytes"]
server_received = server["end"]["sum_received"]["bytes"]
if not sent > 0 or not received > 0:
    sys.exit(f"nothing transferred: sent {sent}, received {received}")
if received != server_received:
    sys.exit(f"client's report of bytes received ({received}) != server's ({server_received})")
if not 0 <= sent - received <= inflight:
    sys.exit(f"sent {sent} vs received {received}: differ by more than {inflight} in flight")
print(sent, received)
PY
  ) || fail "$mode: iperf3's reports: $report"
  read -r sent received <<<"$report"
  note "$mode: iperf3's client sent $sent bytes, its server received $received bytes"
}

iperf3_run both

log_assert_interception
client_pid=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ client ' "$LOG" | head -1 | grep -oE '[0-9]+' | head -1)
server_pid=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ server ' "$LOG" | head -1 | grep -oE '[0-9]+' | head -1)
# The server listens on [::], so its side prints IPv4-mapped addresses.
[[ $(grep -cE "fastsock\[$client_pid\] debug: fd=[0-9]+ client 127.0.0.1:[0-9]+ -> 127.0.0.1:$port on $OPEN_LINK" "$LOG") -ge 2 ]] ||
  fail "want the control and the data connection as client lines of pid $client_pid"
[[ $(grep -cE "fastsock\[$server_pid\] debug: fd=[0-9]+ server (127.0.0.1|\[::ffff:127.0.0.1\]):$port <- .* on $OPEN_LINK" "$LOG") -ge 2 ]] ||
  fail "want the control and the data connection as server lines of pid $server_pid"
max_sent=$(grep -F "fastsock[$client_pid] " "$LOG" | sed -nE 's/.* closed sent=([0-9]+) .*/\1/p' | sort -n | tail -1)
max_recv=$(grep -F "fastsock[$server_pid] " "$LOG" | sed -nE 's/.* closed sent=[0-9]+ received=([0-9]+).*/\1/p' | sort -n | tail -1)
[[ -n "$max_sent" && $max_sent -ge $sent ]] ||
  fail "library counted ${max_sent:-no} bytes sent by the client, iperf3 reports $sent"
[[ -n "$max_recv" && $max_recv -ge $received ]] ||
  fail "library counted ${max_recv:-no} bytes received by the server, iperf3 reports $received"
note "library counted $max_sent bytes sent (client data connection), $max_recv received (server)"
log_assert_no_errors

for mode in client-only server-only; do
  : >"$LOG"
  iperf3_run "$mode"
  log_assert_stayed_tcp "$mode"
  log_assert_no_errors
done
note "PASS"
