#!/usr/bin/env bash
# qperf.sh: a qperf server and `qperf 127.0.0.1 -t 2 tcp_lat tcp_bw`, first with both ends
# under the library, then with only the client, then only the server under it. qperf's
# client opens a control connection to the server's listening port for each test; the
# server forks a child per control connection, which opens a listening socket of its own
# for that test's data connection. Both ends under the library:
#   - each data connection goes over shm, both ends, with byte counts that match qperf's own
#     statistics (within the one message qperf sends or reads after its timer fired);
#   - each control connection starts on shm and moves to TCP when the server forks (a
#     connection shared by two processes is carried by the kernel), with that reason logged
#     on both ends.
# With one end alone under the library, every connection stays on TCP with the reason.
source "$(dirname "$0")/lib.sh"
init_test qperf
require_cmd qperf
require_preload_prefix_ok qperf --version

# stat_of NAME: the number qperf printed (-vvs -uu -e 20: exact, in bytes) for statistic
# NAME in one test's section of its output, given on stdin.
stat_of() { sed -nE "s/^ +$1 += +([0-9]+).*/\1/p"; }

# qperf_run MODE: MODE as in set_ends. Leaves the client's output in $WORK/MODE-client.out
# and sets PORT.
qperf_run() {
  local mode=$1 out
  set_ends "$mode"
  PORT=$(free_port)
  start_bg "$mode-server" 60 $SERVER_WRAP qperf -lp "$PORT"
  wait_for_port "$PORT" 15 "$BG_PID"
  run_fg "$mode-client" 40 $CLIENT_WRAP qperf 127.0.0.1 -lp "$PORT" -t 2 -vvs -uu -e 20 \
    tcp_lat tcp_bw
  # The server's child for the last test may still be closing its end: let it exit (and
  # log) before the server is stopped, which stops its whole process group.
  local server i
  server=$(pgrep -P "$BG_PID" qperf || true)
  for ((i = 0; i < 100; i++)); do
    [[ -n "$server" ]] && pgrep -P "$server" >/dev/null || break
    sleep 0.05
  done
  kill -TERM "$BG_PID" 2>/dev/null
  wait_bg "$mode-server" || true
  if [[ -s "$WORK/$mode-server.out" ]]; then
    fail "$mode: the qperf server printed: $(head -c 300 "$WORK/$mode-server.out")"
  fi
  out=$WORK/$mode-client.out
  sed -n '/^tcp_lat:/,/^tcp_bw:/p' "$out" >"$WORK/$mode-lat.txt"
  sed -n '/^tcp_bw:/,$p' "$out" >"$WORK/$mode-bw.txt"
  lat_loc_sent=$(stat_of loc_send_bytes <"$WORK/$mode-lat.txt")
  lat_loc_recv=$(stat_of loc_recv_bytes <"$WORK/$mode-lat.txt")
  lat_rem_sent=$(stat_of rem_send_bytes <"$WORK/$mode-lat.txt")
  lat_rem_recv=$(stat_of rem_recv_bytes <"$WORK/$mode-lat.txt")
  bw_sent=$(stat_of send_bytes <"$WORK/$mode-bw.txt")
  bw_recv=$(stat_of recv_bytes <"$WORK/$mode-bw.txt")
  bw_msg=65536  # qperf's default tcp_bw message size
  grep -qE '^ +latency += +[0-9.]+ ns' "$WORK/$mode-lat.txt" || fail "$mode: tcp_lat printed no latency: $(cat "$out")"
  grep -qE '^ +bw += +[0-9.]+ bytes/sec' "$WORK/$mode-bw.txt" || fail "$mode: tcp_bw printed no bandwidth: $(cat "$out")"
  [[ -n "$lat_loc_sent" && -n "$lat_loc_recv" && -n "$lat_rem_sent" && -n "$lat_rem_recv" &&
     -n "$bw_sent" && -n "$bw_recv" ]] || fail "$mode: qperf's statistics are missing: $(cat "$out")"
  # tcp_lat is 1-byte ping-pong: every byte the client sent reached the server and came back;
  # each end's count may miss the last byte, moved as its timer fired.
  local d1=$((lat_loc_sent - lat_rem_recv)) d2=$((lat_rem_sent - lat_loc_recv))
  [[ $lat_loc_recv -gt 0 && ${d1#-} -le 1 && ${d2#-} -le 1 ]] ||
    fail "$mode: tcp_lat: client sent $lat_loc_sent, received $lat_loc_recv; server sent $lat_rem_sent, received $lat_rem_recv"
  # tcp_bw: the server received what the client sent, but what was in flight at the end
  # (bounded by the socket buffers); the client's count may miss the message it sent as its
  # timer fired.
  local d3=$((bw_sent - bw_recv))
  [[ $bw_recv -gt 0 && $d3 -ge -$bw_msg && $d3 -le $((64 * 1024 * 1024)) ]] ||
    fail "$mode: tcp_bw: client sent $bw_sent bytes, server received $bw_recv"
  note "$mode: tcp_lat $(grep -oE 'latency += +[0-9]+' "$WORK/$mode-lat.txt" | grep -oE '[0-9]+$') ns, $lat_loc_sent round trips; tcp_bw $(grep -oE 'bw += +[0-9]+' "$WORK/$mode-bw.txt" | grep -oE '[0-9]+$') bytes/s, $bw_sent bytes sent, $bw_recv received"
}

# closed_after LINE: "SENT RECEIVED" of the first closed line, after the log line LINE, of the
# same process and descriptor (descriptor numbers are reused by later connections).
closed_after() {
  local pid fd
  pid=$(sed -nE 's/^fastsock\[([0-9]+)\].*/\1/p' <<<"$1")
  fd=$(sed -nE 's/^fastsock\[[0-9]+\] debug: fd=([0-9]+) .*/\1/p' <<<"$1")
  awk -v line="$1" -v head="fastsock[$pid] debug: fd=$fd closed " '
    $0 == line { seen = 1; next }
    seen && index($0, head) == 1 { sub(/.* closed sent=/, ""); sub(/ received=/, " "); print; exit }' "$LOG"
}

# event_after LINE TEXT: the first log line of LINE's process and descriptor, after LINE
# and before that descriptor's closed line, that contains TEXT (nothing if none).
event_after() {
  local pid fd
  pid=$(sed -nE 's/^fastsock\[([0-9]+)\].*/\1/p' <<<"$1")
  fd=$(sed -nE 's/^fastsock\[[0-9]+\] debug: fd=([0-9]+) .*/\1/p' <<<"$1")
  awk -v line="$1" -v head="fastsock[$pid] debug: fd=$fd " -v text="$2" '
    $0 == line { seen = 1; next }
    seen && index($0, head) == 1 && index($0, " closed ") { exit }
    seen && index($0, head) == 1 && index($0, text) { print; exit }' "$LOG"
}

# within LIB QPERF SLACK: the library's count is qperf's, or up to SLACK bytes more (what
# was moved after qperf's timer stopped its count).
within() { [[ -n "$1" && -n "$2" && $1 -ge $2 && $(($1 - $2)) -le $3 ]]; }

qperf_run both
log_assert_interception
log_assert_ends_match
log_assert_no_errors
# The client is one process; its connections come in order: control, data (tcp_lat),
# control, data (tcp_bw).
client_pid=$(sed -nE 's/^fastsock\[([0-9]+)\] debug: fd=[0-9]+ client .*/\1/p' "$LOG" | sort -u)
[[ $(wc -w <<<"$client_pid") -eq 1 ]] || fail "want one client process in the log, found: $client_pid"
mapfile -t control < <(grep -E "fastsock\[$client_pid\] debug: fd=[0-9]+ client .* -> 127.0.0.1:$PORT on $OPEN_LINK" "$LOG")
mapfile -t data < <(grep -E "fastsock\[$client_pid\] debug: fd=[0-9]+ client .* -> 127.0.0.1:[0-9]+ on " "$LOG" |
  grep -vF -- "-> 127.0.0.1:$PORT on ")
[[ ${#control[@]} -eq 2 ]] || fail "want 2 control connections on $LINK, found ${#control[@]}"
[[ ${#data[@]} -eq 2 ]] || fail "want 2 data connections, found ${#data[@]}: ${data[*]}"
for line in "${data[@]}"; do
  [[ $line =~ \ on\ $OPEN_LINK( |$) ]] || fail "a data connection is not on $LINK: $line"
done
note "2 control and 2 data connections, each on $LINK at connect (both ends, see above)"

if [[ $LINK == shm ]]; then
  # The control connections: the server's end moves to TCP at its fork, the client's follows.
  [[ $(log_count "falls back to tcp (shm: moved to TCP: fork)") -eq 2 ]] ||
    fail "want the server's 2 control connections to move to TCP at its fork: $(grep -F 'falls back' "$LOG")"
  [[ $(grep -cE "fastsock\[$client_pid\] debug: fd=[0-9]+ falls back to tcp \(shm: the peer moved the connection to TCP\)" "$LOG") -eq 2 ]] ||
    fail "want the client's 2 control connections to follow the server to TCP: $(grep -F 'falls back' "$LOG")"
  # No data connection moved: exactly those 4 fallbacks in the log.
  [[ $(log_count "falls back to tcp") -eq 4 ]] || fail "unexpected fallbacks: $(grep -F 'falls back' "$LOG")"
  note "control connections moved to TCP at the server's fork (both ends logged it); data connections stayed on shm"
fi

# Byte counts of the data connections, client end and server end (the server's end is in
# the forked child that accepted it: the server line with the client's address).
check_data_conn() {  # check_data_conn LINE CLIENT_SENT CLIENT_RECV SERVER_SENT SERVER_RECV SLACK
  local line=$1 local_port server_line c_sent c_recv s_sent s_recv
  local_port=$(sed -nE 's/.* client 127.0.0.1:([0-9]+) -> .*/\1/p' <<<"$line")
  server_line=$(grep -E "debug: fd=[0-9]+ server .* <- $(v4_or_mapped "127.0.0.1:$local_port") on " "$LOG")
  [[ $(wc -l <<<"$server_line") -eq 1 && -n "$server_line" ]] ||
    fail "want one server line for the data connection $line, found: $server_line"
  read -r c_sent c_recv <<<"$(closed_after "$line")"
  read -r s_sent s_recv <<<"$(closed_after "$server_line")"
  # Neither end left the link: the server's end lives in a child forked after the parent
  # had used the RDMA device (for the control connection of the test before).
  local end left
  for end in "$line" "$server_line"; do
    left=$(event_after "$end" "falls back to tcp")
    [[ -z $left ]] || fail "data connection $line: an end left $LINK: $left"
  done
  within "$c_sent" "$2" "$6" && within "$c_recv" "$3" "$6" && within "$s_sent" "$4" "$6" &&
    within "$s_recv" "$5" "$6" ||
    fail "data connection $line: library counted client sent=${c_sent:-?} received=${c_recv:-?}, server sent=${s_sent:-?} received=${s_recv:-?}; qperf counted $2 $3 $4 $5 (slack $6)"
  # What the server received, the client sent (tcp_bw's in-flight bytes are dropped at close
  # on the kernel too, so only 'at most').
  [[ $s_recv -le $c_sent && $c_recv -le $s_sent ]] ||
    fail "data connection $line: the server received $s_recv of $c_sent, the client $c_recv of $s_sent"
  note "data connection to port ${line##*-> 127.0.0.1:}: library counts client $c_sent/$c_recv, server $s_sent/$s_recv (sent/received)"
}
check_data_conn "${data[0]}" "$lat_loc_sent" "$lat_loc_recv" "$lat_rem_sent" "$lat_rem_recv" 1
# tcp_bw's receiver reads on after its timer stopped counting: what was in flight then is
# one message on shm; on verbs also the link's window (16 slots of 16 KiB, docs/verbs.md).
bw_slack=$bw_msg
[[ $LINK == verbs ]] && bw_slack=$((bw_msg + 16 * 16384))
check_data_conn "${data[1]}" "$bw_sent" 0 0 "$bw_recv" "$bw_slack"

for mode in client-only server-only; do
  : >"$LOG"
  qperf_run "$mode"
  log_assert_stayed_tcp "$mode"
  log_assert_no_errors
done
note "PASS"
