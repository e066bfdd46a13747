#!/usr/bin/env bash
# progs.sh PROGRAM...: runs each self-contained program of tests/preload/progs over the
# verbs link (tests/preload/run_prog.sh, FASTSOCK_TEST_LINK=verbs as the rdma suite sets
# it), one after the other in one VM boot. Their tcp_pair() waits for the link to be up
# before the checks, so the checks test the link, not TCP before it. Fails if any fails.
source "$(dirname "$0")/guest_lib.sh"
rdma_test progs guest
[[ $# -ge 1 ]] || fail "usage: progs.sh PROGRAM..."
failed=()
for prog in "$@"; do
  if bash "$(dirname "$0")/../preload/run_prog.sh" "$prog"; then
    note "$prog: passed over verbs"
  else
    failed+=("$prog")
  fi
done
[[ ${#failed[@]} -eq 0 ]] || fail "failed over verbs: ${failed[*]}"
note "PASS: ${*}"
