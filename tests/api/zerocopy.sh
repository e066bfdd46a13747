#!/usr/bin/env bash
# zerocopy.sh: MSG_ZEROCOPY for large typed sends on TCP (src/api_zerocopy.cc), with
# typed_zerocopy linked with -lfastsock and its debug log:
#   FASTSOCK_ZEROCOPY=1 on TCP: SO_ZEROCOPY is turned on for the first connection, loopback
#     makes the kernel copy (SO_EE_CODE_ZEROCOPY_COPIED) so zerocopy is turned off for it;
#     the bytes arrive exact although each array is overwritten right after its call; a
#     connection whose application uses the error queue (SO_TIMESTAMPING) is never made
#     zerocopy and keeps its timestamps readable; nor is one whose application set
#     SO_ZEROCOPY itself;
#   unset (the default) on TCP, and FASTSOCK_ZEROCOPY=1 on shm: no zerocopy at all.
# (On loopback the kernel always copies, so the data check cannot catch a call returning
# before its completion; the log shows that the completion was awaited and read.)
source "$(dirname "$0")/../preload/lib.sh"
init_test api_zerocopy
bin=$(prog typed_zerocopy)
# Run as linked (the library loaded as a dependency); word-split by run_fg ($LOG has no spaces).
linked="env -u LD_PRELOAD FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$LOG"

run_fg zc-tcp 60 $linked FASTSOCK_TRANSPORTS=tcp FASTSOCK_ZEROCOPY=1 "$bin" check
grep -qx 'transport: tcp' "$WORK/zc-tcp.out" || fail "zc-tcp: not on tcp"
grep -q '^ok: all zerocopy checks passed' "$WORK/zc-tcp.out" || fail "zc-tcp: incomplete"
grep -q '^ok: with SO_TIMESTAMPING' "$WORK/zc-tcp.out" || fail "zc-tcp: timestamp check did not run"
if grep -q 'zerocopy: SO_ZEROCOPY ' "$LOG" && ! grep -q 'zerocopy: SO_ZEROCOPY on' "$LOG"; then
  skip "the kernel refuses SO_ZEROCOPY: $(grep -m1 'zerocopy: SO_ZEROCOPY' "$LOG")"
fi
[[ $(grep -c 'zerocopy: SO_ZEROCOPY on' "$LOG") == 1 ]] ||
  fail "want SO_ZEROCOPY on for exactly one connection (not the one using the error queue): $(grep zerocopy "$LOG")"
grep -q 'zerocopy: SO_ZEROCOPY already set by the application' "$LOG" ||
  fail "the application's own SO_ZEROCOPY was not left alone: $(grep zerocopy "$LOG")"
grep -q 'zerocopy: the kernel copied (SO_EE_CODE_ZEROCOPY_COPIED), off' "$LOG" ||
  fail "no copied-so-off line (loopback always copies): $(grep zerocopy "$LOG")"
note "tcp: $(grep -c zerocopy "$LOG") zerocopy log lines: SO_ZEROCOPY on, completion read, copied -> off; the application's own SO_ZEROCOPY left alone"

: >"$LOG"
run_fg plain-tcp 60 $linked FASTSOCK_TRANSPORTS=tcp "$bin" check
grep -q '^ok: all zerocopy checks passed' "$WORK/plain-tcp.out" || fail "plain-tcp: incomplete"
! grep -q 'zerocopy' "$LOG" || fail "zerocopy used without FASTSOCK_ZEROCOPY=1: $(grep zerocopy "$LOG")"

: >"$LOG"
run_fg zc-shm 60 $linked FASTSOCK_ZEROCOPY=1 "$bin" check
grep -qx 'transport: shm' "$WORK/zc-shm.out" || fail "zc-shm: not on shm: $(head -3 "$WORK/zc-shm.out")"
grep -q '^ok: all zerocopy checks passed' "$WORK/zc-shm.out" || fail "zc-shm: incomplete"
! grep -q 'zerocopy' "$LOG" || fail "zerocopy used on shm: $(grep zerocopy "$LOG")"
note "default (off) on tcp and FASTSOCK_ZEROCOPY=1 on shm: no zerocopy, data exact"
log_assert_no_errors
note "PASS"
