#!/usr/bin/env bash
# sockperf.sh: a sockperf TCP server and its clients `sockperf ping-pong --tcp` and
# `sockperf throughput --tcp` (1 s each), first with both ends under the library (each
# connection must go over shm), then with only the client, then only the server under it
# (the connections must stay on TCP, with the reason in the log). Every run must report
# valid results: ping-pong a latency, every reply received, no dropped, duplicated or
# out-of-order message; throughput a message rate. Under the library the log's byte counts
# must be sockperf's message counts times the message size, mirrored on both ends (throughput:
# within one message, see below).
source "$(dirname "$0")/lib.sh"
init_test sockperf
require_cmd sockperf
require_preload_prefix_ok sockperf --version
msg_size=14  # sockperf's default message size

# sockperf_run MODE: MODE as in set_ends; checks the clients' reports, and sets pp_sent and
# tp_sent to the messages ping-pong (whole run, warm-up included) and throughput sent.
sockperf_run() {
  local mode=$1 port out
  set_ends "$mode"
  port=$(free_port)
  start_bg "$mode-server" 60 $SERVER_WRAP sockperf server --tcp -i 127.0.0.1 -p "$port"
  wait_for_port "$port" 15 "$BG_PID"
  # --mps: sockperf sizes its per-message table for at most 600,000 round trips a second
  # unless told a rate, and exits with "_seqN > m_maxSequenceNo" when a link is faster (shm
  # reaches that now and then). Pacing at a stated rate bounds the count by construction.
  run_fg "$mode-ping-pong" 30 $CLIENT_WRAP sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 1 --mps 1000000
  run_fg "$mode-throughput" 30 $CLIENT_WRAP sockperf throughput --tcp -i 127.0.0.1 -p "$port" -t 1
  # Both connections closed at both ends (the server closes its end when it sees the client
  # leave) before the server is stopped.
  [[ $mode == both ]] && wait_for_log_lines 'debug: fd=[0-9]+ closed sent=' 4
  kill -TERM "$BG_PID" 2>/dev/null
  wait_bg "$mode-server" || true
  if grep -qiE 'error|fail' "$WORK/$mode-server.out"; then
    fail "$mode: the sockperf server reported: $(grep -m1 -iE 'error|fail' "$WORK/$mode-server.out")"
  fi

  out=$WORK/$mode-ping-pong.out
  grep -qE 'Summary: Latency is [0-9.]+ usec' "$out" || fail "$mode: ping-pong printed no latency"
  grep -qF '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' "$out" ||
    fail "$mode: ping-pong lost, duplicated or reordered messages: $(grep -m1 'dropped messages' "$out")"
  local valid_sent valid_received
  read -r valid_sent valid_received < <(sed -nE 's/.*\[Valid Duration\].*SentMessages=([0-9]+); ReceivedMessages=([0-9]+).*/\1 \2/p' "$out")
  [[ ${valid_sent:-0} -gt 0 && $valid_sent -eq $valid_received ]] ||
    fail "$mode: ping-pong sent ${valid_sent:-?} messages, received ${valid_received:-?} replies"
  note "$mode: ping-pong $valid_sent round trips, $(grep -oE 'Latency is [0-9.]+ usec' "$out")"

  out=$WORK/$mode-throughput.out
  grep -qE 'Summary: Message Rate is [0-9]+ \[msg/sec\]' "$out" || fail "$mode: throughput printed no message rate"
  tp_sent=$(sed -nE 's/.*Total of ([0-9]+) messages sent.*/\1/p' "$out")
  [[ ${tp_sent:-0} -gt 0 ]] || fail "$mode: throughput sent no messages"
  note "$mode: throughput $tp_sent messages, $(grep -oE 'Message Rate is [0-9]+' "$out") msg/s"

  pp_sent=$(sed -nE 's/.*\[Total Run\].*SentMessages=([0-9]+);.*/\1/p' "$WORK/$mode-ping-pong.out")
}

sockperf_run both
# Two connections (ping-pong, throughput), both ends of each on the link.
log_assert_interception
log_assert_ends_match
log_assert_all_on_link
[[ $LINK_CONNS -eq 2 ]] || fail "want 2 connections in the log, found $LINK_CONNS"
# ping-pong: the client sent its messages, the server received and echoed them all; the
# client may stop (timer) before reading the last reply. The client of ping-pong is the
# process of the first client line; the server's closed lines follow its own.
pp_bytes=$((pp_sent * msg_size))
tp_bytes=$((tp_sent * msg_size))
pairs=$(log_closed_pairs | sort | uniq -c | awk '{print $1, $2, $3}' | tr '\n' ';')
pp_client=$(sed -nE 's/^fastsock\[([0-9]+)\] debug: fd=[0-9]+ client .*/\1/p' "$LOG" | head -1)
server_pid=$(sed -nE 's/^fastsock\[([0-9]+)\] debug: fd=[0-9]+ server .*/\1/p' "$LOG" | head -1)
read -r c_sent c_recv < <(grep -F "fastsock[$pp_client] " "$LOG" | sed -nE 's/.* closed sent=([0-9]+) received=([0-9]+)$/\1 \2/p')
read -r s_sent s_recv < <(grep -F "fastsock[$server_pid] " "$LOG" | sed -nE 's/.* closed sent=([0-9]+) received=([0-9]+)$/\1 \2/p' | grep -v '^0 ')
[[ ${c_sent:-} == "$pp_bytes" && ${s_recv:-} == "$pp_bytes" &&
   $c_recv -le $s_sent && $s_sent -le $pp_bytes && $((pp_bytes - c_recv)) -le $msg_size ]] ||
  fail "want ping-pong's client closed sent=$pp_bytes ($pp_sent messages), the server received as much and echoed it, the client received all but at most the last reply; client sent=${c_sent:-?} received=${c_recv:-?}, server sent=${s_sent:-?} received=${s_recv:-?}; all closed lines (count sent received): $pairs"
# throughput: sockperf counts a message before its send (client_send_packet in its client.h)
# and does not take it back when the send fails with EINTR (msg_sendto in its common.h); its
# SIGALRM timer has no SA_RESTART, so a send blocked on a full link when the second ends is
# counted but not (or only partly) sent. The client's end closed with sent=X, the server's
# with received=X, and X is sockperf's count or at most one message less.
tp_client_sent=$(log_closed_pairs | sed -nE 's/^([0-9]+) 0$/\1/p' | grep -vx 0 || true)
[[ $(wc -w <<<"$tp_client_sent") -eq 1 && $(log_closed_pairs | grep -cx "0 $tp_client_sent") -eq 1 &&
   $tp_client_sent -le $tp_bytes && $((tp_bytes - tp_client_sent)) -le $msg_size ]] ||
  fail "want throughput closed sent=X on the client, received=X on the server, X between $((tp_bytes - msg_size)) and $tp_bytes (sockperf's count, $tp_sent messages, may include one its timer interrupted); closed lines (count sent received): $pairs"
note "log: ping-pong moved $pp_bytes bytes each way, throughput $tp_client_sent bytes (sockperf counted $tp_bytes)"
log_assert_no_errors

for mode in client-only server-only; do
  : >"$LOG"
  sockperf_run "$mode"
  log_assert_stayed_tcp "$mode"
  log_assert_no_errors
done
note "PASS"
