#!/usr/bin/env bash
# halo.sh: docs/examples/halo.c (a two-rank halo exchange with strided gather/scatter, each
# rank checking its half against a single-process computation) under the library (both
# ranks on shm) and without it (the header's libc fallback).
source "$(dirname "$0")/../preload/lib.sh"
init_test api_halo
run_fg preload 30 under_fastsock "$(prog halo)"
[[ $(grep -c "halves match.*(transport $LINK)" "$WORK/preload.out") -eq 2 ]] ||
  fail "under the library: $(cat "$WORK/preload.out")"
run_fg plain 30 without_fastsock "$(prog halo)"
[[ $(grep -c 'halves match.*(transport none)' "$WORK/plain.out") -eq 2 ]] ||
  fail "without the library: $(cat "$WORK/plain.out")"
log_assert_no_errors
note "both ranks match the reference, on $LINK and on the plain fallback"
note "PASS"
