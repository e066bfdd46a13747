#!/usr/bin/env bash
# cli.sh: --help, --version and the exit codes of usage errors (2) and runtime failures (1).
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_cli

expect_rc() {  # expect_rc RC ARGS...
  local want=$1 rc=0
  shift
  timeout -k 5 20 "$PIPE" "$@" >"$WORK/out" 2>&1 || rc=$?
  [[ $rc -eq $want ]] || { cat "$WORK/out"; fail "'fastsock-pipe $*' exited $rc, expected $want"; }
}

expect_rc 0 --help
grep -q -- '--local' "$WORK/out" || fail "--help does not mention --local"
grep -q 'corrupt-at' "$WORK/out" && fail "--help shows the test-only --corrupt-at"
# The man page documents every option --help lists, and the version.
man_page="$(dirname "$0")/../../docs/fastsock-pipe.1"
for o in $(grep -oE -- '--[a-z][a-z-]+' "$WORK/out" | sort -u); do
  grep -qF -- "${o//-/\\-}" "$man_page" || fail "man page lacks $o"  # roff writes - as \-
done
expect_rc 0 --version
grep -qF "fastsock-pipe $(sed -E 's/^fastsock-pipe //' "$WORK/out")" "$man_page" || fail "man page version differs"
grep -qE '^fastsock-pipe [0-9]+\.[0-9]+' "$WORK/out" || fail "--version: $(cat "$WORK/out")"
expect_rc 2 --no-such-option
expect_rc 2 -u
expect_rc 2 -l 100 -u 10
expect_rc 2 --local -h 127.0.0.1
expect_rc 2 --cpus 0,1
expect_rc 2 --local --cpus 0
expect_rc 2 -p -1
expect_rc 2 extra-argument
expect_rc 2 -b 0
expect_rc 2 --buffer lots
# -b: both ends set SO_SNDBUF and SO_RCVBUF before listen/connect (the window scale is
# negotiated in the handshake), as NPtcp -b does.
if command -v strace >/dev/null; then
  timeout -k 5 30 strace -f -o "$WORK/strace" -e trace=setsockopt,listen,connect \
    "$PIPE" --local -b 65536 -u 8 "${QUICK[@]}" -q >/dev/null 2>&1 || fail "--local -b run failed"
  awk '/SO_SNDBUF, \[65536\]/ { snd++ } /SO_RCVBUF, \[65536\]/ { rcv++ }
       / listen\(/ { if (snd != 1 || rcv != 1) bad = "listen" }
       / connect\(.*AF_INET/ { if (snd != 2 || rcv != 2) bad = "connect" }
       END { if (bad || snd != 2 || rcv != 2) { print "buffers not set before " (bad ? bad : "the end"); exit 1 } }' \
    "$WORK/strace" || { cat "$WORK/strace"; fail "-b did not set both ends' buffers first"; }
else
  note "strace not installed: -b's socket options not checked"
fi
# Nobody listens on this port: a runtime failure.
port=$(free_port)
expect_rc 1 -h 127.0.0.1 -P "$port" -u 8
grep -q 'cannot connect' "$WORK/out" || fail "no reason for the connection failure"
# --max-time stops early but still succeeds and says so.
expect_rc 0 --local -u 8388608 --max-time 0.3 "${QUICK[@]}" --json "$WORK/stop.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s=d["transports"][0]["sizes"]; sys.exit(0 if d["stopped_early"] and s and s[-1]["bytes"] < 8388608 else 1)' \
  "$WORK/stop.json" || fail "--max-time did not stop the run early"
# Progress: one line per size on stderr with --progress (stderr is not a terminal here).
timeout -k 5 20 "$PIPE" --local -u 64 "${QUICK[@]}" -q --progress 2>"$WORK/progress" >/dev/null ||
  fail "--progress run failed"
n=$(grep -c 'sizes done' "$WORK/progress")
[[ $n -eq $("$PIPE" --print-schedule -u 64 | wc -l) ]] || fail "--progress printed $n lines"
timeout -k 5 20 "$PIPE" --local -u 64 "${QUICK[@]}" -q 2>"$WORK/noprogress" >/dev/null
grep -q 'sizes done' "$WORK/noprogress" && fail "progress printed to a non-terminal without --progress"
# Pinning: recorded in the JSON; a CPU that does not exist is a runtime failure.
if [[ $(nproc) -ge 2 ]]; then
  expect_rc 0 --local --cpus 0,1 -u 64 "${QUICK[@]}" --json "$WORK/pin.json"
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["metadata"]["pinning"]; sys.exit(0 if p == {"transmitter_cpu": 0, "receiver_cpu": 1} else 1)' \
    "$WORK/pin.json" || fail "pinning not recorded in the JSON"
else
  note "fewer than 2 CPUs: pinning to 0,1 not checked"
fi
# Hygiene: both ends on one CPU is warned about at start and recorded in the JSON.
expect_rc 0 --local --cpus 0,0 -u 64 "${QUICK[@]}" -q --json "$WORK/same.json"
grep -q 'warning: both ends pinned to the same CPU 0' "$WORK/out" || fail "no same-CPU warning"
python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["metadata"]["warnings"]; sys.exit(0 if any("same CPU 0" in x for x in w) and any("loopback" in x for x in w) else 1)' \
  "$WORK/same.json" || fail "warnings not recorded in the JSON"
expect_rc 1 --local --cpus 0,100000 -u 64 "${QUICK[@]}"
grep -q 'cannot pin the receiver' "$WORK/out" || fail "no reason for the pinning failure"
note "PASS"
