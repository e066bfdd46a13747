#!/usr/bin/env bash
# verbs_unavailable.sh (runs on the host, outside the VM): on a host without any RDMA
# device, `fastsock info` says verbs is not usable and why: "no RDMA device". Skipped (77)
# on a host that has an RDMA device, where the statement cannot be checked.
source "$(dirname "$0")/guest_lib.sh"
rdma_test verbs_unavailable
require_cmd python3
[[ ${FASTSOCK_HAVE_VERBS:-1} == 1 ]] ||
  skip "this build has no verbs transport (meson -Dverbs=disabled, or libibverbs-dev/librdmacm-dev missing)"

if [[ -d /sys/class/infiniband ]] && [[ -n $(ls /sys/class/infiniband 2>/dev/null) ]]; then
  skip "this host has RDMA devices ($(ls /sys/class/infiniband | tr '\n' ' ')): cannot check the no-device case"
fi
[[ -x ${FASTSOCK_TOOL:-} ]] || fail "FASTSOCK_TOOL=${FASTSOCK_TOOL:-} is not an executable"
text=$(timeout 20 "$FASTSOCK_TOOL" info 2>&1) || fail "fastsock info failed: $text"
row=$(grep -E '^[[:space:]]+verbs[[:space:]]' <<<"$text") || fail "fastsock info has no verbs row: $text"
note "fastsock info: $(echo $row)"
[[ $(awk '{ print $3 }' <<<"$row") == no ]] || fail "verbs is usable on a host without an RDMA device"
grep -qi 'no RDMA device' <<<"$row" || fail "the verbs row does not say 'no RDMA device'"
reason=$(transport_field verbs reason) || fail "fastsock info --json failed"
available=$(transport_field verbs available)
[[ $available == false ]] || fail "fastsock info --json: verbs available=$available, want false"
grep -qi 'no RDMA device' <<<"$reason" || fail "fastsock info --json: verbs reason $reason lacks 'no RDMA device'"
note "verbs is unavailable and says why, in text and JSON"
