#!/usr/bin/env bash
# compare_runs.sh: `fastsock-pipe compare A.json B.json` on synthetic runs whose answer is
# known: identical runs pass (0); a latency regression at a small size or a bandwidth
# regression at a large one beyond the threshold fails (1), within it passes; improvements
# pass; bad input exits 2. A real run compared with itself passes.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_compare_runs

# make_run FILE 'transport:bytes=t_median_us/mbps_avg,...;transport:...'
make_run() {
  python3 - "$1" "$2" <<'PY'
import json, sys
transports = []
for part in sys.argv[2].split(";"):
    name, sizes = part.split(":")
    rows = []
    for item in sizes.split(","):
        b, vals = item.split("=")
        t, bw = vals.split("/")
        rows.append({"bytes": int(b), "t_median": float(t) * 1e-6, "mbps_avg": float(bw)})
    transports.append({"name": name, "status": "ok", "sizes": rows})
json.dump({"schema": "fastsock-pipe", "schema_version": 2, "transports": transports}, open(sys.argv[1], "w"))
PY
}

expect() {  # expect RC ARGS...
  local want=$1 rc=0
  shift
  timeout -k 5 20 "$PIPE" compare "$@" >"$WORK/out" 2>&1 || rc=$?
  [[ $rc -eq $want ]] || { cat "$WORK/out"; fail "'compare $*' exited $rc, expected $want"; }
}

BASE='tcp:64=10/51.2,1024=12/682.7,65536=40/13107,1048576=4194/2000'
make_run "$WORK/a.json" "$BASE"
make_run "$WORK/same.json" "$BASE"
make_run "$WORK/slow-small.json" 'tcp:64=12/42.7,1024=12/682.7,65536=40/13107,1048576=4194/2000'
make_run "$WORK/slow-large.json" 'tcp:64=10/51.2,1024=12/682.7,65536=40/13107,1048576=4194/1700'
make_run "$WORK/faster.json" 'tcp:64=7/73.1,1024=8/1024,65536=30/17476,1048576=3000/2796'

expect 0 "$WORK/a.json" "$WORK/same.json"
grep -q '4 sizes compared, 0 beyond' "$WORK/out" || fail "identical runs: wrong summary"
# +20 % median time at 64 bytes.
expect 1 "$WORK/a.json" "$WORK/slow-small.json"
grep -qE '^tcp +64 median_us .* \+20\.00  REGRESSION' "$WORK/out" || { cat "$WORK/out"; fail "64-byte regression not named"; }
expect 0 "$WORK/a.json" "$WORK/slow-small.json" --threshold 25
# Bandwidth 2000 -> 1700 Mbit/s at 1 MiB: B needs 2000/1700 - 1 = 17.65 % more time.
expect 1 "$WORK/a.json" "$WORK/slow-large.json"
grep -qE '^tcp +1048576 Mbit/s .* \+17\.65  REGRESSION' "$WORK/out" || { cat "$WORK/out"; fail "bandwidth regression not named"; }
expect 0 "$WORK/a.json" "$WORK/slow-large.json" --threshold 20
# With the split above 1 MiB that size is judged on its (unchanged) median time instead.
expect 0 "$WORK/a.json" "$WORK/slow-large.json" --split 2000000
# Faster everywhere, and the reverse direction of the same pair fails.
expect 0 "$WORK/a.json" "$WORK/faster.json"
expect 1 "$WORK/faster.json" "$WORK/a.json"
note "regressions detected at the threshold, improvements pass"

# Several transports are matched by name; only unix regresses here.
make_run "$WORK/multi-a.json" "$BASE;unix:64=8/64,1048576=3000/2796"
make_run "$WORK/multi-b.json" "$BASE;unix:64=9.2/55.7,1048576=3000/2796"
expect 1 "$WORK/multi-a.json" "$WORK/multi-b.json"
grep -qE '^unix +64 .*REGRESSION' "$WORK/out" || fail "unix regression not named"
grep -qE '^tcp .*REGRESSION' "$WORK/out" && fail "tcp reported as regressed"

# Bad input: exit 2.
expect 2 "$WORK/a.json"
expect 2 "$WORK/a.json" "$WORK/does-not-exist.json"
printf 'not json' >"$WORK/garbage.json"
expect 2 "$WORK/a.json" "$WORK/garbage.json"
printf '{"schema": "fastsock-pipe", "schema_version": 1, "sizes": []}' >"$WORK/v1.json"
expect 2 "$WORK/a.json" "$WORK/v1.json"
printf '{"schema": "fastsock-pipe", "schema_version": 2, "transports": [{"name": "tcp", "sizes": [{"bytes": "x"}]}]}' >"$WORK/badtype.json"
expect 2 "$WORK/a.json" "$WORK/badtype.json"
make_run "$WORK/disjoint.json" 'tcp:3=10/2.4'
expect 2 "$WORK/a.json" "$WORK/disjoint.json"
expect 2 "$WORK/a.json" "$WORK/same.json" --threshold
expect 2 "$WORK/a.json" "$WORK/same.json" --bogus
note "bad input exits 2"

# A real saved run against itself.
run_fg real 30 "$PIPE" --local -u 4096 "${QUICK[@]}" -q --json "$WORK/real.json"
expect 0 "$WORK/real.json" "$WORK/real.json"
note "PASS"
