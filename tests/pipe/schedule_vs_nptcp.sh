#!/usr/bin/env bash
# schedule_vs_nptcp.sh: fastsock-pipe's size schedule (--print-schedule) against the one the
# installed NPtcp (Debian netpipe-tcp) prints, for several -l/-u/-p combinations. NPtcp's
# receiver computes the sizes itself, so it gets the same options; -n 3 keeps each NPtcp run
# to a fraction of a second (the repetition count does not change the schedule).
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_schedule_vs_nptcp
require_cmd NPtcp

compared=0
for combo in "-u 100 -p 3" "-u 4096 -p 3" "-u 300 -p 2" "-u 200 -p 0" "-l 5 -u 700 -p 0" \
             "-l 24 -u 3000 -p 5"; do
  read -ra args <<<"$combo"
  port=$(free_port)
  start_bg "np-rx-$compared" 30 without_fastsock NPtcp -P "$port" -n 3 "${args[@]}"
  wait_for_port "$port" 10 "$BG_PID"
  run_fg "np-tx-$compared" 30 without_fastsock NPtcp -h 127.0.0.1 -P "$port" -n 3 "${args[@]}" \
    -o "$WORK/np-$compared.out"
  expect_bg_ok "np-rx-$compared"
  theirs=$(grep -oE '^ *[0-9]+: +[0-9]+ bytes' "$WORK/np-tx-$compared.out" | awk '{print $2}' | tr '\n' ' ')
  [[ -n "$theirs" ]] || fail "NPtcp $combo printed no schedule"
  ours_all=$("$PIPE" --print-schedule "${args[@]}") || fail "fastsock-pipe --print-schedule $combo failed"
  ours=$(grep -v 'upper bound' <<<"$ours_all" | tr '\n' ' ')
  [[ "$ours" == "$theirs" ]] || fail "schedule differs for $combo
  NPtcp:         $theirs
  fastsock-pipe: $ours"
  # The requested upper bound is always among fastsock-pipe's sizes.
  upper=$(sed -nE 's/.*-u ([0-9]+).*/\1/p' <<<"$combo")
  grep -qE "^$upper( |$)" <<<"$ours_all" || fail "$combo: upper bound $upper not in the schedule"
  note "$combo: $(wc -w <<<"$theirs") sizes identical to NPtcp's"
  compared=$((compared + 1))
done
note "PASS ($compared combinations)"
