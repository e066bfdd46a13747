#!/usr/bin/env bash
# npout.sh: np.out in NetPIPE 5.x's column set (--npout-format 5) read back: bytes and
# Gbit/s avg/min/max, usec; consistent with the JSON of the same run; the integrity layout
# counts a corrupted byte at the failing size. Both column sets are also read by gnuplot
# (what NetPIPE's npplot scripts use) when it is installed.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_npout

run_fg np5 60 "$PIPE" --local -u 65536 "${QUICK[@]}" -q --npout-format 5 -o "$WORK/np5.out" \
  --json "$WORK/np5.json"
run_fg np3 60 "$PIPE" --local -u 4096 "${QUICK[@]}" -q -o "$WORK/np3.out"
"$PIPE" --print-schedule -u 65536 | awk '{print $1}' >"$WORK/schedule.txt"
python3 - "$WORK/np5.out" "$WORK/np5.json" "$WORK/schedule.txt" <<'PY' || fail "5.x np.out check failed"
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
t = json.load(open(sys.argv[2]))["transports"][0]["sizes"]
sched = [int(x) for x in open(sys.argv[3]).read().split()]
def check(c, m):
    if not c:
        print("FAIL:", m); sys.exit(1)
check(len(lines) == len(sched), "one line per size")
for line, s, want in zip(lines, t, sched):
    # netpipe.c 5.x: "%9d %9.3lf %9.3lf %9.3lf %7.2lf"
    check(re.fullmatch(r" *\d+ +\d+\.\d{3} +\d+\.\d{3} +\d+\.\d{3} +\d+\.\d{2}", line), "layout: %r" % line)
    b, avg, lo, hi, usec = line.split()
    b, avg, lo, hi, usec = int(b), float(avg), float(lo), float(hi), float(usec)
    check(b == want, "bytes %d != %d" % (b, want))
    check(lo <= avg + 0.001 and avg <= hi + 0.001, "min <= avg <= max at %d" % b)
    check(abs(usec - s["t_avg_trial"] * 1e6) <= 0.006, "usec is the average trial time at %d" % b)
    check(abs(avg - b * 8e-9 / s["t_avg_trial"]) <= 0.0006, "avg Gbit/s = bytes*8/avg time at %d" % b)
    check(abs(hi - s["mbps_max"] / 1e3) <= 0.0006 and abs(lo - s["mbps_min"] / 1e3) <= 0.0006, "min/max at %d" % b)
print("ok: %d lines" % len(lines))
PY
note "5.x columns consistent with the JSON"

# Integrity layout: "%9d bytes %6u times %8d failures"; the corrupted size counts its byte.
rc=0
timeout -k 5 60 "$PIPE" --local -i -u 200000 "${QUICK[@]}" -q --corrupt-at 150000 --npout-format 5 \
  -o "$WORK/np5i.out" >"$WORK/np5i.log" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/np5i.log"; fail "corrupted run exited $rc, expected 1"; }
python3 - "$WORK/np5i.out" <<'PY' || fail "5.x integrity np.out check failed"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [re.fullmatch(r" *(\d+) bytes +(\d+) times +(\d+) failures", l) for l in lines]
if not lines or not all(rows):
    print("FAIL: layout", lines[:3]); sys.exit(1)
fails = [int(r.group(3)) for r in rows]
if fails[-1] < 1 or any(fails[:-1]):
    print("FAIL: failures column", fails); sys.exit(1)
print("ok: failure counted at %s bytes" % rows[-1].group(1))
PY
note "5.x integrity layout counts the corrupted byte"

if command -v gnuplot >/dev/null; then
  for f in np3 np5; do
    n=$(gnuplot -e "stats '$WORK/$f.out' using 1:2 nooutput; print STATS_records" 2>&1 | tail -1)
    [[ $n -eq $(wc -l <"$WORK/$f.out") ]] || fail "gnuplot read $n records of $f.out"
  done
  note "gnuplot reads both column sets"
else
  note "gnuplot not installed: its reading of np.out not checked"
fi
rc=0
"$PIPE" --local --npout-format 4 -u 8 >"$WORK/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "--npout-format 4 exited $rc, expected 2"
note "PASS"
