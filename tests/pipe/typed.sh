#!/usr/bin/env bash
# typed.sh: --elements int32|double move their arrays with the typed API through the
# FASTSOCK_DYNAMIC shim, and the results say which path each end really took:
#  - both ends under libfastsock.so (on $LINK): "library", integrity holds;
#  - no library: "shim" (the header's sendmsg/recvmsg loops), integrity holds;
#  - --api plain under the library: "plain"; --api portable: "portable", integrity holds;
#  - a library transmitter against a receiver without it (separate processes): each end
#    reports its own path, and the bytes still arrive intact;
#  - --compare hands --api to its workers.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_typed
require_preload_prefix_ok "$PIPE" --version

# check_arrays FILE API TX_PATH TX_TRANSPORT RX_PATH RX_TRANSPORT (transport "-": none)
check_arrays() {
  python3 - "$@" <<'PY' || fail "$(basename "$1"): arrays not as expected ($*)"
import json, sys
f, api, txp, txt, rxp, rxt = sys.argv[1:]
j = json.load(open(f))
want = {"transmitter": {"path": txp, "transport": None if txt == "-" else txt},
        "receiver": {"path": rxp, "transport": None if rxt == "-" else rxt}}
got = j["transports"][0]["arrays"]
ok = (j["options"]["api"] == api and got == want and not j["integrity_failed"]
      and j["options"]["integrity"] and j["transports"][0]["status"] == "ok")
if not ok:
    print("options.api:", j["options"]["api"], "arrays:", got, "want:", want,
          "integrity_failed:", j["integrity_failed"])
sys.exit(0 if ok else 1)
PY
}

# 200000 doubles = 1.6 MB: past the sizes the links move in one ring slot.
RUN=(--local --elements D] -i -u 200000 "${QUICK[@]}")

run_fg lib 90 under_fastsock "$PIPE" "${RUN[@]}" --json "$WORK/lib.json"
grep -q 'integrity check passed at all' "$WORK/lib.out" || fail "library: integrity not passed"
grep -q "double elements (typed API, libfastsock's entry points)" "$WORK/lib.out" ||
  fail "library: the header line does not name the library's typed path"
grep -q "arrays: transmitter library over fastsock $LINK, receiver library over fastsock $LINK" \
  "$WORK/lib.out" || fail "library: the summary does not say library over $LINK"
check_arrays "$WORK/lib.json" typed library "$LINK" library "$LINK"
note "under the library: both ends used its typed entry points on $LINK, integrity held"
if [[ $LINK == verbs ]]; then  # arrays of 64 KiB and more leave from the caller's memory
  grep -q "zero-copy sends from the application's buffers" "$LOG" ||
    fail "library over verbs: no zero-copy send of the large arrays"
  note "over verbs the large arrays went zero-copy ($(grep -oE '[0-9]+ bytes sent zero-copy' "$LOG" | head -2 | tr '\n' ' '))"
fi

run_fg shim 90 without_fastsock "$PIPE" "${RUN[@]}" --json "$WORK/shim.json"
grep -q 'integrity check passed at all' "$WORK/shim.out" || fail "shim: integrity not passed"
grep -q "no library: the shim's plain sendmsg/recvmsg loops" "$WORK/shim.out" ||
  fail "shim: the header line does not say the shim's plain loops"
check_arrays "$WORK/shim.json" typed shim - shim -
note "without the library: both ends used the shim's plain loops, integrity held"

run_fg plain 90 under_fastsock "$PIPE" "${RUN[@]}" --api plain --json "$WORK/plain.json"
check_arrays "$WORK/plain.json" plain plain "$LINK" plain "$LINK"
note "--api plain under the library: plain send/recv on $LINK"

run_fg portable 90 under_fastsock "$PIPE" --local --elements I] -s -i -u 200000 "${QUICK[@]}" \
  --api portable --json "$WORK/portable.json"
check_arrays "$WORK/portable.json" portable portable "$LINK" portable "$LINK"
note "--api portable (int32, streaming): big-endian staging both ways, integrity held"

# Separate processes, only the transmitter under the library: the connection stays on TCP
# (the receiver has no fastsock), each end reports what it used, and nothing is corrupted.
port=$(free_port)
start_bg rx 90 without_fastsock "$PIPE" -P "$port"
wait_for_port "$port"
run_fg mixed 90 under_fastsock "$PIPE" -h 127.0.0.1 -P "$port" --elements D] -i -u 200000 \
  "${QUICK[@]}" --json "$WORK/mixed.json"
expect_bg_ok rx
check_arrays "$WORK/mixed.json" typed library tcp shim -
note "library transmitter, plain receiver: library over tcp / shim, integrity held"

# Bytes stay plain whatever --api says.
run_fg bytes 60 under_fastsock "$PIPE" --local -i -u 4096 "${QUICK[@]}" --api typed \
  --json "$WORK/bytes.json"
check_arrays "$WORK/bytes.json" plain plain "$LINK" plain "$LINK"

# --compare: each worker takes --api and reports its own ends.
run_fg cmp 90 "$PIPE" --local --compare tcp,fastsock --elements D] -i -u 4096 "${QUICK[@]}" \
  --json "$WORK/cmp.json"
python3 - "$WORK/cmp.json" "$LINK" <<'PY' || fail "--compare: arrays per transport not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
a = {t["name"]: t["arrays"] for t in j["transports"]}
ok = (a["tcp"]["transmitter"]["path"] == "shim" and a["tcp"]["receiver"]["path"] == "shim"
      and a["fastsock"]["transmitter"] == {"path": "library", "transport": sys.argv[2]}
      and a["fastsock"]["receiver"] == {"path": "library", "transport": sys.argv[2]})
print(a) if not ok else None
sys.exit(0 if ok else 1)
PY
note "--compare tcp,fastsock: shim on tcp, library on $LINK"
note "PASS"
