#!/usr/bin/env bash
# pollsel.sh poll|ppoll|select|pselect: a server and a client process that wait for every
# accept, read and write with the given call, on the plain kernel and then under the library.
source "$(dirname "$0")/lib.sh"
api=${1:?usage: $0 poll|ppoll|select|pselect}
init_test "pollsel_$api"

run_pair() {  # run_pair plain|preload
  local tag=$1 wrap=without_fastsock
  [[ $tag == preload ]] && wrap=under_fastsock
  rm -f "$WORK/port"
  start_bg "$tag-server" 60 $wrap "$(prog pollsel)" server "$api" --port-file "$WORK/port"
  wait_for_file "$WORK/port" 15 "$BG_PID"
  run_fg "$tag-client" 60 $wrap "$(prog pollsel)" client "$api" --port "$(cat "$WORK/port")"
  expect_bg_ok "$tag-server"
  note "$tag: $(cat "$WORK/$tag-server.out" "$WORK/$tag-client.out" | grep -c '^ok:') checks passed"
}

run_pair plain
run_pair preload
assert_pair_preloaded
log_assert_interception
log_assert_ends_match
log_assert_no_errors
note "PASS"
