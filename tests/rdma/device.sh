#!/usr/bin/env bash
# device.sh (runs in the Soft-RoCE VM): the VM's RDMA device is there (`ibv_devices` lists
# $SOFTROCE_DEV), and `fastsock info` finds the verbs transport usable on it: its text table
# says "yes" in the USABLE column for verbs and `info --json` says available.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_device guest
require_cmd ibv_devices python3

devs=$(timeout 20 ibv_devices) || fail "ibv_devices failed: $devs"
grep -qE "^[[:space:]]+$SOFTROCE_DEV[[:space:]]" <<<"$devs" ||
  fail "ibv_devices does not list $SOFTROCE_DEV: $devs"
note "ibv_devices lists $SOFTROCE_DEV"

[[ -x ${FASTSOCK_TOOL:-} ]] || fail "FASTSOCK_TOOL=${FASTSOCK_TOOL:-} is not an executable"
text=$(timeout 20 "$FASTSOCK_TOOL" info 2>&1) || fail "fastsock info failed: $text"
row=$(grep -E '^[[:space:]]+verbs[[:space:]]' <<<"$text") || fail "fastsock info has no verbs row: $text"
note "fastsock info: $(echo $row)"
# Columns: TRANSPORT IN-CHAIN USABLE REASON...
[[ $(awk '{ print $3 }' <<<"$row") == yes ]] ||
  fail "fastsock info does not find verbs usable with $SOFTROCE_DEV present: $(echo $row)"
available=$(transport_field verbs available) || fail "fastsock info --json failed"
[[ $available == true ]] || fail "fastsock info --json: verbs available=$available, want true"
note "verbs is usable on $SOFTROCE_DEV (text and JSON agree)"
