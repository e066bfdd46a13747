#!/usr/bin/env bash
# modes.sh: bidirectional (-2), cache-invalidate (-I) and element-type (--elements) runs over
# loopback, each with the integrity check on, their JSON read back; a corrupted byte is
# caught in bidirectional mode too; the modes combine with --compare.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_modes

check_json() {  # check_json FILE PYTHON-BODY (j = the run, t = its first transport)
  python3 - "$1" "$2" <<'PY' || fail "$(basename "$1"): check failed"
import json, sys
j = json.load(open(sys.argv[1]))
t = j["transports"][0]
def check(c, m):
    if not c:
        print("FAIL:", m); sys.exit(1)
exec(sys.argv[2])
PY
}

# Bidirectional: bandwidth counts both directions (bytes * 2 * 8 / best trial's time).
run_fg bidir 60 "$PIPE" --local -2 -i -u 262144 "${QUICK[@]}" --json "$WORK/bidir.json"
grep -q 'integrity check passed' "$WORK/bidir.out" || fail "bidirectional: integrity not passed"
check_json "$WORK/bidir.json" '
check(j["options"]["mode"] == "bidirectional", "mode")
for s in t["sizes"]:
    check(abs(s["mbps_max"] - s["bytes"] * 2 * 8 / s["t_best_trial"] / 1e6) < 1e-6 * s["mbps_max"], "aggregate bandwidth")'
rc=0
timeout -k 5 60 "$PIPE" --local -2 -i -u 200000 "${QUICK[@]}" --corrupt-at 150000 >"$WORK/bidir-bad.out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/bidir-bad.out"; fail "bidirectional corruption: exit $rc, expected 1"; }
grep -q 'first at payload offset 150000' "$WORK/bidir-bad.out" || fail "bidirectional: offset not reported"
note "bidirectional: aggregate bandwidth, clean and corrupted integrity runs"

# Cache invalidation with a small stated cache so the pools stay small here.
run_fg inval 60 "$PIPE" --local -I --cache-bytes 1048576 -i -u 65536 "${QUICK[@]}" --json "$WORK/inval.json"
grep -q 'integrity check passed' "$WORK/inval.out" || fail "-I: integrity not passed"
check_json "$WORK/inval.json" '
check(j["options"]["cache_invalidate"] is True, "option")
check(j["metadata"]["cache_bytes"] == 1048576, "cache size recorded")
check(65536 in [s["bytes"] for s in t["sizes"]], "sizes")'
note "cache-invalidate: integrity holds while walking the pools"

# Element types: -l/-u count elements; bytes = elements * size.
for spec in "I]:4:int32" "D]:8:double" "B]:1:byte"; do
  IFS=: read -r notation size name <<<"$spec"
  run_fg "el-$name" 60 "$PIPE" --local --elements "$notation" -i -u 1000 "${QUICK[@]}" \
    --json "$WORK/el-$name.json"
  "$PIPE" --print-schedule -u 1000 | awk '{print $1}' >"$WORK/sched.txt"
  check_json "$WORK/el-$name.json" "
sched = [int(x) for x in open('$WORK/sched.txt').read().split()]
check(j['options']['element_type'] == '$name' and j['options']['element_size'] == $size, 'element options')
check([s['elements'] for s in t['sizes']] == sched, 'elements != schedule')
check(all(s['bytes'] == s['elements'] * $size for s in t['sizes']), 'bytes != elements * size')"
done
note "element types: sizes in elements, bytes = elements x size"

# Modes reach the workers of --compare.
run_fg cmp-bidir 60 "$PIPE" --local --compare tcp,unix -2 --elements D] -i -u 4096 "${QUICK[@]}" \
  --json "$WORK/cmp.json"
check_json "$WORK/cmp.json" '
check(j["options"]["mode"] == "bidirectional", "mode")
for x in j["transports"]:
    check(x["status"] == "ok" and not x["integrity_failed"] and 4096 * 8 in [s["bytes"] for s in x["sizes"]], x["name"])'
rc=0
"$PIPE" --local -s -2 -u 8 >"$WORK/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "-s -2 together exited $rc, expected 2"
note "PASS"
