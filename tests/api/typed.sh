#!/usr/bin/env bash
# typed.sh shm|tcp: the typed-array API between two real processes (typed_peer send/recv),
# in every linking setting and mix of them:
#   linked      both ends linked with -lfastsock (no LD_PRELOAD)
#   preload     both ends unlinked (FASTSOCK_DYNAMIC) under LD_PRELOAD
#   plain       both ends unlinked without the library: the header's libc fallback
#   linked->plain, plain->preload: a typed end under the library with a peer without it
# With `tcp` the library runs with FASTSOCK_TRANSPORTS=tcp (connections tracked, on TCP).
source "$(dirname "$0")/../preload/lib.sh"
LINK=${1:?usage: typed.sh shm|tcp}
init_test "api_typed_$LINK"
[[ $LINK == tcp ]] && export FASTSOCK_TRANSPORTS=tcp

linked=$(prog typed_peer_linked)
dynamic=$(prog typed_peer_dynamic)

# pair NAME SENDER_WRAP SENDER RECEIVER_WRAP RECEIVER WANT_SENDER_TRANSPORT WANT_RECV_TRANSPORT
pair() {
  local name=$1 swrap=$2 sbin=$3 rwrap=$4 rbin=$5 want_s=$6 want_r=$7 port
  rm -f "$WORK/$name.port"
  start_bg "$name-recv" 60 $rwrap "$rbin" recv "$WORK/$name.port"
  wait_for_file "$WORK/$name.port" 10 || fail "$name: receiver did not listen"
  port=$(cat "$WORK/$name.port")
  run_fg "$name-send" 60 $swrap "$sbin" send "$port"
  expect_bg_ok "$name-recv"
  local side want
  for side in send recv; do
    [[ $side == send ]] && want=$want_s || want=$want_r
    grep -qx "transport: $want" "$WORK/$name-$side.out" ||
      fail "$name: the $side end's transport is '$(grep '^transport:' "$WORK/$name-$side.out")', want $want"
    grep -q '^ok: .*all cases passed' "$WORK/$name-$side.out" || fail "$name: $side did not finish"
  done
  note "$name: sender on '$want_s', receiver on '$want_r': $(grep -c '^ok:' "$WORK/$name-send.out") + $(grep -c '^ok:' "$WORK/$name-recv.out") checks"
  grep -h '^skip:' "$WORK/$name-send.out" "$WORK/$name-recv.out" | sed "s/^/$TEST_NAME: $name: /" || true
}

# A linked binary runs as it is: the library is loaded as a dependency, not preloaded (in a
# sanitizer build the binary is instrumented itself). Debug log into $LOG like under_fastsock.
# (Word-split by pair: $LOG has no spaces.)
as_linked="env -u LD_PRELOAD FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$LOG"

pair linked "$as_linked" "$linked" "$as_linked" "$linked" "$LINK" "$LINK"
pair preload under_fastsock "$dynamic" under_fastsock "$dynamic" "$LINK" "$LINK"
pair plain without_fastsock "$dynamic" without_fastsock "$dynamic" "(none)" "(none)"
pair linked-to-plain "$as_linked" "$linked" without_fastsock "$dynamic" tcp "(none)"
pair plain-to-preload without_fastsock "$dynamic" under_fastsock "$dynamic" "(none)" tcp
grep -q '^setting: plain fallback' "$WORK/plain-send.out" || fail "plain: the shim found a library"
grep -q '^setting: library' "$WORK/preload-send.out" || fail "preload: the shim did not find the library"
log_assert_no_errors
note "PASS"
