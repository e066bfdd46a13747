#!/usr/bin/env bash
# transports.sh: Unix-domain and IPv6 sockets (local mode and separate receiver/transmitter
# processes), and --compare: one coordinator running tcp, unix, fastsock and a missing and a
# broken preload library; the broken ones are skipped with their reason, the others measured
# with their trials interleaved.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_transports

json_check() {  # json_check FILE PYTHON-EXPRESSION-ON-d MESSAGE
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
    "$1" "$2" || fail "$3"
}

# Local mode over a Unix socket at a given path, then over IPv6 loopback.
run_fg local-unix 30 "$PIPE" --local --unix "$WORK/local.sock" -u 4096 "${QUICK[@]}" -i \
  --json "$WORK/unix.json"
json_check "$WORK/unix.json" 'd["transports"][0]["name"] == "unix" and len(d["transports"][0]["sizes"]) > 20' \
  "--local --unix: no unix results"
[[ -e "$WORK/local.sock" ]] && fail "--local --unix left its socket file behind"
have_ipv6=0
python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null && have_ipv6=1
if [[ $have_ipv6 -eq 1 ]]; then
  run_fg local-ipv6 30 "$PIPE" --local -6 -u 4096 "${QUICK[@]}" -i --json "$WORK/v6.json"
  json_check "$WORK/v6.json" 'd["transports"][0]["name"] == "tcp6"' "--local -6: not tcp6"
else
  note "no IPv6 loopback here: -6 not checked"
fi

# Receiver and transmitter as separate processes: Unix socket, then IPv6.
start_bg rx-unix 30 "$PIPE" --unix "$WORK/rx.sock"
wait_for_file "$WORK/rx-unix.out" 10 "$BG_PID"  # "receiver listening on ..." once bound
run_fg tx-unix 30 "$PIPE" -h "unix:$WORK/rx.sock" -u 2048 "${QUICK[@]}" -i -q
expect_bg_ok rx-unix
if [[ $have_ipv6 -eq 1 ]]; then
  port=$(free_port)
  start_bg rx-v6 30 "$PIPE" -6 -P "$port"
  wait_for_port "$port" 10 "$BG_PID"
  run_fg tx-v6 30 "$PIPE" -h ::1 -P "$port" -u 2048 "${QUICK[@]}" -i -q
  expect_bg_ok rx-v6
fi
note "Unix and IPv6 connections work in both roles"

# --compare: a missing library and a file that is not a library are skipped with a reason.
printf 'not a shared object\n' >"$WORK/broken.so"
FASTSOCK_LIBRARY="$FASTSOCK_LIB" FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$LOG" \
  run_fg compare 90 "$PIPE" --local --compare "tcp,unix,fastsock,$WORK/missing.so,$WORK/broken.so" \
  -u 16384 "${QUICK[@]}" -i --json "$WORK/cmp.json" --csv "$WORK/cmp.csv" -o "$WORK/np"
"$PIPE" --print-schedule -u 16384 | awk '{print $1}' >"$WORK/schedule.txt"
python3 - "$WORK/cmp.json" "$WORK/cmp.csv" "$WORK/schedule.txt" "$(basename "$FASTSOCK_LIB")" <<'PY' ||
import csv, json, math, sys
j = json.load(open(sys.argv[1]))
sched = [int(x) for x in open(sys.argv[3]).read().split()]
lib = sys.argv[4]
def check(c, m):
    if not c:
        print("FAIL:", m); sys.exit(1)
t = {x["name"]: x for x in j["transports"]}
check(list(t) == ["tcp", "unix", "fastsock", "missing.so", "broken.so"], "transport order %s" % list(t))
check(t["missing.so"]["status"] == "skipped" and "no such" in t["missing.so"]["reason"], "missing.so not skipped")
check(t["broken.so"]["status"] == "skipped" and "not loaded" in t["broken.so"]["reason"],
      "broken.so: %s" % t["broken.so"]["reason"])
for n in ("tcp", "unix", "fastsock"):
    check(t[n]["status"] == "ok", n + " did not run: " + t[n]["reason"])
    check([s["bytes"] for s in t[n]["sizes"]] == sched, n + " sizes != schedule")
    check(not t[n]["integrity_failed"], n + " integrity")
check(lib in t["fastsock"]["ld_preload"], "fastsock lane not preloaded: " + t["fastsock"]["ld_preload"])
check("libfastsock" not in t["tcp"]["ld_preload"] + t["unix"]["ld_preload"], "tcp/unix preloaded")
c = j["comparison"]
check(c["baseline"] == "tcp" and len(c["sizes"]) == len(sched), "comparison rows")
for row, k in zip(c["sizes"], range(len(sched))):
    check(row["bytes"] == sched[k], "comparison bytes")
    check(set(row["transports"]) == {"tcp", "unix", "fastsock"}, "comparison transports")
    base = t["tcp"]["sizes"][k]
    for n, e in row["transports"].items():
        s = t[n]["sizes"][k]
        check(math.isclose(e["ratio_t_median"], s["t_median"] / base["t_median"], rel_tol=1e-9), "median ratio")
        check(math.isclose(e["ratio_t_p99"], s["t_p99"] / base["t_p99"], rel_tol=1e-9), "p99 ratio")
        check(math.isclose(e["ratio_mbps_avg"], s["mbps_avg"] / base["mbps_avg"], rel_tol=1e-9), "bandwidth ratio")
# Interleaving: at every size, trial k of each transport starts before trial k+1 of any,
# and the transports take their turns in their --compare order.
for k in range(len(sched)):
    starts = [t[n]["sizes"][k]["trial_starts"] for n in ("tcp", "unix", "fastsock")]
    check(all(len(x) == 2 for x in starts), "two trial starts per size")
    order = [starts[i][trial] for trial in range(2) for i in range(3)]
    check(order == sorted(order), "trials not interleaved at %d bytes: %s" % (sched[k], starts))
rows = list(csv.DictReader(open(sys.argv[2])))
check(sorted({r["transport"] for r in rows}) == ["fastsock", "tcp", "unix"], "CSV transports")
check(len(rows) == 3 * len(sched), "CSV rows")
print("ok: %d sizes x 3 transports" % len(sched))
PY
  fail "--compare JSON/CSV check failed"
for n in tcp unix fastsock; do
  [[ $(wc -l <"$WORK/np.$n") -gt 20 ]] || fail "no np.out for $n"
done
grep -q 'broken.so skipped: .*not loaded' "$WORK/compare.out" || fail "broken.so: no skip reason printed"
# Only the fastsock transport's two processes ran under the library: its log names one
# client and one server connection, in exactly two processes.
grep -qE "debug: fd=[0-9]+ client 127.0.0.1:.* on $OPEN_LINK" "$LOG" || fail "fastsock lane not tracked on $LINK"
pids=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ (client|server) ' "$LOG" | grep -oE '\[[0-9]+\]' | sort -u | wc -l)
[[ $pids -eq 2 ]] || fail "expected the library in 2 processes (the fastsock lane), found $pids"
log_assert_no_errors
note "--compare: tcp, unix, fastsock measured; missing and broken libraries skipped"

# Usage errors.
for bad in "--local --compare tcp,carrier-pigeon" "--compare tcp" "--local --compare tcp,tcp" \
           "--local --compare tcp -6"; do
  rc=0
  # shellcheck disable=SC2086
  "$PIPE" $bad -u 8 >"$WORK/bad.out" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "'$bad' exited $rc, expected 2"
done
note "PASS"
