#!/usr/bin/env bash
# typed_hpp.sh: the C++ wrappers linked with -lfastsock (both ends in one process, on the
# library's link) and built with FASTSOCK_DYNAMIC run without the library (libc fallback).
source "$(dirname "$0")/../preload/lib.sh"
init_test api_typed_hpp
run_fg linked 30 env -u LD_PRELOAD FASTSOCK_LOG=debug "FASTSOCK_LOG_FILE=$LOG" "$(prog typed_hpp)"
grep -q '^ok: all C++ checks passed' "$WORK/linked.out" || fail "linked: incomplete"
grep -qE '^transport: (shm|tcp)$' "$WORK/linked.out" || fail "linked: the library did not track the socket"
run_fg plain 30 without_fastsock "$(prog typed_hpp_dynamic)"
grep -q '^ok: all C++ checks passed' "$WORK/plain.out" || fail "plain: incomplete"
grep -qx 'transport: (none)' "$WORK/plain.out" || fail "plain: a library was found"
note "linked ($(grep '^transport' "$WORK/linked.out")) and FASTSOCK_DYNAMIC without the library: $(grep -c '^ok:' "$WORK/linked.out") + $(grep -c '^ok:' "$WORK/plain.out") checks"
log_assert_no_errors
note "PASS"
