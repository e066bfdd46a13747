#!/usr/bin/env bash
# integrity.sh: -i verifies every byte. A clean local run over loopback passes (exit 0) in
# ping-pong and streaming; with the test-only --corrupt-at N the transmitter flips payload
# byte N once, and the run must name that offset and exit 1.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_integrity

for mode in pingpong stream; do
  extra=()
  [[ $mode == stream ]] && extra=(-s)
  run_fg "clean-$mode" 60 "$PIPE" --local -i -u 200000 "${QUICK[@]}" "${extra[@]}" \
    --json "$WORK/clean-$mode.json"
  grep -q 'integrity check passed at all' "$WORK/clean-$mode.out" ||
    fail "$mode: no 'integrity check passed' line"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["integrity_failed"])' \
    "$WORK/clean-$mode.json" || fail "$mode: JSON reports an integrity failure"
  note "$mode: clean run passed the integrity check"

  # Offset 150000 lies beyond the first sizes, in the middle of a run.
  rc=0
  timeout -k 5 60 "$PIPE" --local -i -u 200000 "${QUICK[@]}" "${extra[@]}" --corrupt-at 150000 \
    >"$WORK/bad-$mode.out" 2>&1 || rc=$?
  [[ $rc -eq 1 ]] || { cat "$WORK/bad-$mode.out"; fail "$mode: corrupted run exited $rc, expected 1"; }
  grep -q 'integrity check failed at .* first at payload offset 150000' "$WORK/bad-$mode.out" ||
    { cat "$WORK/bad-$mode.out"; fail "$mode: the corrupted byte's offset was not reported"; }
  note "$mode: corrupted byte at offset 150000 detected (exit 1)"
done

# Without -i the same corruption goes unnoticed: the detection above comes from the check.
run_fg "unchecked" 60 "$PIPE" --local -u 200000 "${QUICK[@]}" -q --corrupt-at 150000
note "PASS"
