#!/usr/bin/env bash
# outputs.sh: a short local run (ping-pong, then streaming) writes CSV, JSON and np.out; each
# is parsed back with python3 and checked against the others and against the schedule.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_outputs

for mode in pingpong stream; do
  extra=()
  [[ $mode == stream ]] && extra=(-s)
  run_fg "run-$mode" 60 "$PIPE" --local -u 5000 "${QUICK[@]}" "${extra[@]}" \
    --csv "$WORK/$mode.csv" --json "$WORK/$mode.json" -o "$WORK/$mode.np"
  "$PIPE" --print-schedule -u 5000 | awk '{print $1}' >"$WORK/schedule.txt"
  python3 - "$WORK/$mode" "$WORK/schedule.txt" "$mode" <<'PY' || fail "$mode: output check failed"
import csv, json, sys
base, sched_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
sched = [int(x) for x in open(sched_path).read().split()]
def check(cond, msg):
    if not cond:
        print("FAIL:", msg); sys.exit(1)

j = json.load(open(base + ".json"))
check(j["schema"] == "fastsock-pipe" and j["schema_version"] == 2, "schema")
for key in ("host", "kernel", "cpu_model", "cpus_online", "clock", "pinning", "started_at", "warnings"):
    check(key in j["metadata"], "metadata lacks " + key)
check(j["metadata"]["clock"]["resolution_ns"] > 0, "clock resolution")
check(any("loopback" in w for w in j["metadata"]["warnings"]), "no loopback warning")
check(j["options"]["mode"] == mode and j["options"]["upper"] == 5000, "options")
check(len(j["transports"]) == 1 and j["comparison"] is None, "one transport, no comparison")
t = j["transports"][0]
check(t["name"] == "tcp" and t["status"] == "ok", "transport entry")
check([s["bytes"] for s in t["sizes"]] == sched, "JSON sizes != schedule")
for s in t["sizes"]:
    check(0 < s["t_min"] <= s["t_median"] <= s["t_p99"] <= s["t_max"], "time order at %d" % s["bytes"])
    check(0 < s["mbps_min"] <= s["mbps_avg"] <= s["mbps_max"], "bandwidth order at %d" % s["bytes"])
    check(s["repeats"] >= 3 and s["trials"] == 2, "repeats/trials at %d" % s["bytes"])
    # Bandwidth of the best trial is bytes*8/t_best_trial in decimal Mbit/s.
    best = s["bytes"] * 8 / s["t_best_trial"] / 1e6
    check(abs(best - s["mbps_max"]) <= 1e-6 * best, "mbps_max is not the best trial's")
summ = t["summary"]
check(summ["min_latency"] == min(s["t_median"] for s in t["sizes"]), "min latency")
check(summ["peak_mbps"] == max(s["mbps_max"] for s in t["sizes"]), "peak bandwidth")
check(j["integrity_failed"] is False and j["stopped_early"] is False, "flags")

rows = list(csv.DictReader(open(base + ".csv")))
check(rows and list(rows[0].keys())[:5] == ["transport", "bytes", "elements", "repeats", "trials"], "CSV header")
check([int(r["bytes"]) for r in rows] == sched, "CSV sizes != schedule")
for r, s in zip(rows, t["sizes"]):
    check(abs(float(r["t_median_us"]) - s["t_median"] * 1e6) < 1e-3, "CSV/JSON median differ")

# np.out as NetPIPE 3.7 writes it: bytes, Mbps (2^20 bit/s), seconds per message.
np = [l.split() for l in open(base + ".np")]
check(all(len(f) == 3 for f in np), "np.out needs 3 columns")
check([int(f[0]) for f in np] == sched, "np.out sizes != schedule")
for f, s in zip(np, t["sizes"]):
    t = float(f[2])
    check(abs(t - s["t_best_trial"]) < 1e-8, "np.out time is not the best trial")
    # np.out rounds the time to 10 ns, so recompute the bandwidth from the JSON's time.
    mbps = int(f[0]) * 8 / (s["t_best_trial"] * 1048576)
    check(abs(float(f[1]) - mbps) < 1e-5 * mbps + 1e-6, "np.out Mbps (2^20 bit/s)")
print("ok: %d sizes" % len(sched))
PY
  grep -q '^# Hockney fit' "$WORK/run-$mode.out" || fail "$mode: no Hockney line in the table"
  grep -q '^# peak bandwidth: .* Mbit/s' "$WORK/run-$mode.out" || fail "$mode: no peak bandwidth"
  note "$mode: CSV, JSON and np.out agree ($(wc -l <"$WORK/$mode.np") sizes)"
done
note "PASS"
