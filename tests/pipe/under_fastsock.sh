#!/usr/bin/env bash
# under_fastsock.sh: fastsock-pipe --local (integrity mode) under LD_PRELOAD=libfastsock.so.
# The library's debug log must show the receiver's listener, the transmitter's connection as
# a client and the receiver's accept as a server on $LINK (shm: both ends run it), both ends closed with mirrored byte
# counts, and no library errors.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_under_fastsock
require_preload_prefix_ok

run_fg "local-preload" 60 under_fastsock "$PIPE" --local -i -u 65536 "${QUICK[@]}" \
  --json "$WORK/run.json"
grep -q 'integrity check passed at all' "$WORK/local-preload.out" || fail "integrity not passed"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["metadata"]["ld_preload"] else 1)' \
  "$WORK/run.json" || fail "JSON metadata does not record LD_PRELOAD"
log_assert_contains ' listen 127.0.0.1:'
log_assert_contains ' client 127.0.0.1:'
log_assert_contains ' server 127.0.0.1:'
grep -qE "fastsock\[[0-9]+\] debug: fd=[0-9]+ client .* on $OPEN_LINK" "$LOG" || fail "client not on $LINK"
grep -qE "fastsock\[[0-9]+\] debug: fd=[0-9]+ server .* on $OPEN_LINK" "$LOG" || fail "server not on $LINK"
# Both processes (transmitter and forked receiver) log, and their counts mirror each other.
pids=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ (client|server) ' "$LOG" |
  grep -oE '\[[0-9]+\]' | sort -u | wc -l)
[[ $pids -eq 2 ]] || fail "expected the connection in 2 processes, found $pids"
tx=$(grep -E ' closed sent=' "$LOG" | grep -v 'sent=0 received=0$' |
  sed -nE 's/.* closed sent=([0-9]+) received=([0-9]+)$/\1 \2/p' | sort)
[[ $(wc -l <<<"$tx") -eq 2 ]] || fail "expected 2 closed lines with traffic, got: $tx"
a=$(head -1 <<<"$tx"); b=$(tail -1 <<<"$tx")
[[ "$a" == "$(awk '{print $2, $1}' <<<"$b")" ]] || fail "closed counts do not mirror: $a / $b"
log_assert_no_errors
note "connection tracked on $LINK in both processes; counts $a / $b"
note "PASS"
