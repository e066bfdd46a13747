#!/usr/bin/env bash
# redis.sh: redis-server (no persistence, in the foreground) with `redis-benchmark -q -n
# 20000 -t set,get,lpush` (50 connections per test) and redis-cli storing then reading back
# 1 MiB of random data; first with both ends under the library, then with only the clients,
# then only the server under it. Every run: the benchmark reports a rate for each test and
# no error, the list it pushed to has exactly 20000 elements, and the value read back has
# the stored data's sha256. Both ends under the library: every connection is on shm at
# both ends, and the server's byte counts for the SET and the GET are exactly the RESP
# sizes of those commands and replies. One end alone: every connection stays on TCP with
# the reason.
source "$(dirname "$0")/lib.sh"
init_test redis
require_cmd redis-server redis-cli redis-benchmark sha256sum
require_preload_prefix_ok redis-server --version
require_preload_prefix_ok redis-cli --version
requests=20000
value_size=$((1024 * 1024))
head -c "$value_size" /dev/urandom >"$WORK/value.bin"
want=$(sha256sum <"$WORK/value.bin" | cut -d' ' -f1)

# The server's end of the SET connection received the command in RESP
# (*3 $3 SET $4 blob $N <value>, each \r\n-terminated) and answered +OK; the GET
# connection received *2 $3 GET $4 blob and answered $N <value>.
bulk() { printf '$%d\r\n%s\r\n' "$1" "$2"; }
header_len=$(bulk "$value_size" "" | wc -c)
set_cmd=$(( $(printf '*3\r\n' | wc -c) + $(bulk 3 SET | wc -c) + $(bulk 4 blob | wc -c) + header_len + value_size ))
get_cmd=$(( $(printf '*2\r\n' | wc -c) + $(bulk 3 GET | wc -c) + $(bulk 4 blob | wc -c) ))

# redis_run MODE: MODE as in set_ends.
redis_run() {
  local mode=$1 port out test got len
  set_ends "$mode"
  port=$(free_port)
  mkdir -p "$WORK/$mode-dir"
  start_bg "$mode-server" 150 $SERVER_WRAP redis-server --port "$port" --bind 127.0.0.1 \
    --save '' --appendonly no --daemonize no --dir "$WORK/$mode-dir"
  BG_SERVER=$BG_PID
  wait_for_port "$port" 15 "$BG_PID"
  run_fg "$mode-benchmark" 60 $CLIENT_WRAP redis-benchmark -h 127.0.0.1 -p "$port" -q \
    -n "$requests" -t set,get,lpush
  out=$WORK/$mode-benchmark.txt
  tr '\r' '\n' <"$WORK/$mode-benchmark.out" >"$out"  # -q rewrites a progress line with \r
  if grep -qiE 'error|fail' "$out"; then
    fail "$mode: redis-benchmark reported: $(grep -m1 -iE 'error|fail' "$out")"
  fi
  for test in SET GET LPUSH; do
    grep -qE "^$test: [0-9.]+ requests per second" "$out" ||
      fail "$mode: redis-benchmark printed no rate for $test: $(tail -c 300 "$out")"
  done
  run_fg "$mode-llen" 20 $CLIENT_WRAP redis-cli -h 127.0.0.1 -p "$port" LLEN mylist
  len=$(cat "$WORK/$mode-llen.out")
  [[ $len == "$requests" ]] || fail "$mode: the benchmark's list has $len elements, want $requests"
  note "$mode: $(grep -E '^(SET|GET|LPUSH): [0-9.]+ requests per second' "$out" | sed -E 's/ requests per second.*//' | tr '\n' ' ')requests/s; LLEN mylist = $len"

  # While a client waits in BLPOP, both processes' published stats (`fastsock stat`, as a
  # user would look) show that connection: on the link when both ends run the library,
  # on TCP with the reason when one end does.
  # (No timeout of its own: the emulated RDMA device makes every step slow in the VM.)
  start_bg "$mode-blpop" 60 $CLIENT_WRAP redis-cli -h 127.0.0.1 -p "$port" BLPOP wakeup 0
  local blpop=$BG_PID
  for _ in $(seq 100); do
    $CLIENT_WRAP timeout 5 redis-cli -h 127.0.0.1 -p "$port" CLIENT LIST \
      >"$WORK/$mode-clients.out" 2>&1 || true
    grep -q 'cmd=blpop' "$WORK/$mode-clients.out" && break
    sleep 0.1
  done
  grep -q 'cmd=blpop' "$WORK/$mode-clients.out" || fail "$mode: redis-cli BLPOP never reached the server"
  local reason
  case $mode in
    both) stat_assert_conns "$BG_SERVER" "$LINK"; stat_assert_conns "$blpop" "$LINK" ;;
    *) if reason=$(one_end_reason "$mode"); then
         stat_assert_conns "$([[ $mode == client-only ]] && echo "$blpop" || echo "$BG_SERVER")" tcp "$reason"
       else
         note "$mode: not checked in fastsock stat: $reason"
       fi ;;
  esac
  run_fg "$mode-wakeup" 20 $CLIENT_WRAP redis-cli -h 127.0.0.1 -p "$port" LPUSH wakeup now
  wait_bg "$mode-blpop" || fail "$mode: redis-cli BLPOP failed: $(cat "$WORK/$mode-blpop.out")"
  [[ $(cat "$WORK/$mode-blpop.out") == $'wakeup\nnow' ]] ||
    fail "$mode: BLPOP answered: $(head -c 200 "$WORK/$mode-blpop.out")"

  run_fg "$mode-set" 20 $CLIENT_WRAP redis-cli -h 127.0.0.1 -p "$port" -x SET blob \
    <"$WORK/value.bin"
  [[ $(cat "$WORK/$mode-set.out") == OK ]] || fail "$mode: SET answered: $(head -c 200 "$WORK/$mode-set.out")"
  run_fg "$mode-get" 20 $CLIENT_WRAP redis-cli -h 127.0.0.1 -p "$port" GET blob
  # redis-cli writes the value raw (stdout is not a terminal), then a newline.
  [[ $(stat -c %s "$WORK/$mode-get.out") -eq $((value_size + 1)) ]] ||
    fail "$mode: GET returned $(stat -c %s "$WORK/$mode-get.out") bytes, want $value_size and a newline"
  got=$(head -c "$value_size" "$WORK/$mode-get.out" | sha256sum | cut -d' ' -f1)
  [[ $got == "$want" ]] || fail "$mode: GET's value has sha256 $got, the stored data $want"
  note "$mode: 1 MiB SET then GET: sha256 matches"

  # The server has closed its end of the GET connection (redis-cli exits without closing
  # its own) before it is stopped.
  [[ $mode == both ]] && wait_for_log_lines " closed sent=[0-9]+ received=$get_cmd\$" 1
  kill -TERM "$BG_SERVER" 2>/dev/null
  wait_bg "$mode-server" || true
  grep -q 'ready to exit' "$WORK/$mode-server.out" ||
    fail "$mode: redis-server did not shut down cleanly: $(tail -c 300 "$WORK/$mode-server.out")"
}

redis_run both
log_assert_interception
log_assert_ends_match
log_assert_all_on_link
# 3 tests x 50 benchmark connections, at least (it also opens one to read the config).
[[ $LINK_CONNS -ge 150 ]] || fail "want at least 150 connections on $LINK, found $LINK_CONNS"
note "$LINK_CONNS connections, every one on $LINK at both ends"
log_assert_closed 5 "$set_cmd"
log_assert_closed "$((header_len + value_size))" "$get_cmd"
note "log: the server's SET connection closed sent=5 received=$set_cmd, the GET connection sent=$((header_len + value_size)) received=$get_cmd"
log_assert_no_errors

for mode in client-only server-only; do
  : >"$LOG"
  redis_run "$mode"
  log_assert_stayed_tcp "$mode"
  log_assert_no_errors
done
note "PASS"
