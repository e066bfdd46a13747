#!/usr/bin/env bash
# netpipe.sh: NetPIPE's NPtcp in integrity mode (-i: every message's contents are checked),
# messages up to 1 MB (-u), 3 repetitions each (-n), with both ends under the library (the
# connection goes over shm), as a baseline without it, and with only one end under the
# library (either one: the connection must stay on TCP and say why). Every run must finish
# every size with "Integrity check passed".
source "$(dirname "$0")/lib.sh"
init_test netpipe
require_cmd NPtcp
opts=(-i -u 1048576 -n 3)

run_np() {  # run_np plain|preload|tx-only|rx-only
  local tag=$1 rx_wrap=without_fastsock tx_wrap=without_fastsock port
  case $tag in
    preload) rx_wrap=under_fastsock; tx_wrap=under_fastsock ;;
    tx-only) tx_wrap=under_fastsock ;;
    rx-only) rx_wrap=under_fastsock ;;
  esac
  port=$(free_port)
  start_bg "$tag-receiver" 90 $rx_wrap NPtcp -P "$port" "${opts[@]}"
  wait_for_port "$port" 15 "$BG_PID"
  run_fg "$tag-transmitter" 90 $tx_wrap NPtcp -h 127.0.0.1 -P "$port" "${opts[@]}" \
    -o "$WORK/$tag-np.out"
  expect_bg_ok "$tag-receiver"
  local passed failed
  passed=$(grep -c 'Integrity check passed' "$WORK/$tag-transmitter.out" || true)
  failed=$(cat "$WORK/$tag-transmitter.out" "$WORK/$tag-receiver.out" |
    grep -ci 'integrity check failed\|error' || true)
  [[ $failed -eq 0 ]] || fail "$tag: NPtcp reported errors: $(grep -i 'failed\|error' "$WORK/$tag"-*.out | head -3)"
  [[ $passed -gt 10 ]] || fail "$tag: only $passed sizes passed the integrity check"
  note "$tag: $passed message sizes passed the integrity check"
  eval "passed_${tag//-/_}=$passed"
}

run_np plain
run_np preload
# shellcheck disable=SC2154  # set through eval in run_np
[[ $passed_plain -eq $passed_preload ]] ||
  fail "plain run checked $passed_plain sizes, the run under the library $passed_preload"
log_assert_interception
log_assert_ends_match
# Every byte one end sent, the other received: compare the two processes' closed lines
# (zero-count lines are listening sockets).
tx_pid=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ client ' "$LOG" | head -1 | grep -oE '[0-9]+' | head -1)
rx_pid=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ server ' "$LOG" | head -1 | grep -oE '[0-9]+' | head -1)
tx=$(grep -F "fastsock[$tx_pid] " "$LOG" | grep -v 'closed sent=0 received=0$' |
  sed -nE 's/.* closed sent=([0-9]+) received=([0-9]+)$/\1 \2/p' | sort)
rx=$(grep -F "fastsock[$rx_pid] " "$LOG" | grep -v 'closed sent=0 received=0$' |
  sed -nE 's/.* closed sent=([0-9]+) received=([0-9]+)$/\2 \1/p' | sort)
[[ -n "$tx" ]] || fail "no closed line from the transmitter (pid $tx_pid)"
[[ "$tx" == "$rx" ]] || fail "transmitter's sent/received ($tx) do not mirror the receiver's ($rx)"
note "transmitter's connection counts mirror the receiver's: $(echo $tx)"
log_assert_no_errors

# Only one end under the library: plain TCP, and the reason is recorded.
: >"$LOG"
run_np tx-only
log_assert_stayed_tcp client-only
: >"$LOG"
run_np rx-only
log_assert_stayed_tcp server-only
note "one end alone under the library: on tcp, with the reason recorded"
log_assert_no_errors
note "PASS"
