#!/usr/bin/env bash
# epoll_echo.sh lt|et: the epoll echo server and client (separate programs, separate
# processes) run on the plain kernel, then both under the library. 3 concurrent
# connections of ~1 MB each are echoed; each ends with a half-close (EPOLLRDHUP).
source "$(dirname "$0")/lib.sh"
mode=${1:?usage: $0 lt|et}
init_test "epoll_echo_$mode"
conns=3
bytes=1000000

run_pair() {  # run_pair plain|preload
  local tag=$1 wrap=without_fastsock
  [[ $tag == preload ]] && wrap=under_fastsock
  rm -f "$WORK/port"
  start_bg "$tag-server" 60 $wrap "$(prog epoll_echo_server)" --mode "$mode" \
    --conns "$conns" --port-file "$WORK/port"
  wait_for_file "$WORK/port" 15 "$BG_PID"
  run_fg "$tag-client" 60 $wrap "$(prog epoll_echo_client)" --mode "$mode" \
    --port "$(cat "$WORK/port")" --clients "$conns" --bytes "$bytes"
  expect_bg_ok "$tag-server"
  note "$tag: $conns connections echoed ($mode)"
}

run_pair plain
run_pair preload
assert_pair_preloaded
log_assert_interception
log_assert_ends_match
for ((i = 0; i < conns; i++)); do
  n=$((bytes + 7 * i))
  # The client's and the server's end of connection i both moved n bytes each way.
  [[ $(log_count_matching "closed sent=$n received=$n\$") -eq 2 ]] ||
    fail "want 2 'closed sent=$n received=$n' lines (client + server end)"
done
log_assert_no_errors
note "PASS"
