#!/usr/bin/env bash
# vendor.sh SCENARIO: the vendor link (transports/vendor/) carrying real connections
# between two python processes under the library, through the test vendor library
# (tests/vendor/tv.c: prefixed calls over Unix sockets) given as a `vendor` rules line,
# with FASTSOCK_TRANSPORTS=vendor,tcp unless said otherwise. Scenarios (vendor_peer.py):
#   c2s, s2c      4 MB of a byte pattern each way, intact, carried by the link
#   chat          client-speaks-first and server-speaks-first exchanges on the link
#   poll, epoll   the socket waited for together with a pipe (a kernel descriptor)
#   fdready       c2s with the profile's readiness=fd (the library's fds in the kernel's poll)
#   fork          the client forks mid-stream: it leaves the link, the child goes on on TCP
#   late          the server's library delivers late (TV_DELAY_MS): the client forks
#                 before the server read its Switch, so it cannot leave cleanly: reset,
#                 never a resync frame read as data
#   kill          kill -9 of a streaming client: the server sees end or reset, never hangs;
#                 meanwhile `fastsock stat` shows the client's connection on vendor
#   fail_socket, fail_connect, nopoll
#                 tvsocket fails, tvconnect fails, the library lacks tvpoll: the stream
#                 stays on TCP, intact, with the reason recorded; `fastsock info` tells
#                 why an unusable profile is (fail_socket, nopoll), `fastsock stat` shows
#                 the connection on tcp with the reason (fail_connect)
#   drop          the vendor connection drops mid-stream: both ends see ECONNRESET
#   chain         shm,vendor,tcp: shm takes the same-host connection
#   closed_listener  c2s, the server closing its listening socket right after accept: the
#                 library's listener lingers until the client's library connect came
#   slow_close    two connections, the server closing both one after the other, its
#                 library's close taking 4 s (TV_SLOW_CLOSE_MS): the second connection's
#                 end waits behind the first one's close in the service thread, and its
#                 close() waits for it, so TCP's end never overtakes the vendor stream's
#                 (the peer would reset after 2 s); both streams end intact
source "$(dirname "$0")/lib.sh"
scenario=${1:?scenario}
init_test "vendor_$scenario"
require_cmd python3
[[ -f ${TV_LIB:-} && -f ${TV_NOPOLL_LIB:-} ]] || fail "TV_LIB/TV_NOPOLL_LIB are not set"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$here:$here/../rdma  # vendor_peer.py, pattern_stream.py
export TV_DIR=$WORK FASTSOCK_RULES=$WORK/rules FASTSOCK_TRANSPORTS=vendor,tcp
lib=$TV_LIB readiness=poll
case $scenario in
  nopoll) lib=$TV_NOPOLL_LIB ;;
  fdready) readiness=fd ;;
  chain) export FASTSOCK_TRANSPORTS=shm,vendor,tcp ;;
esac
echo "vendor tv library=$lib names=prefix:tv readiness=$readiness" >"$WORK/rules"
mode=$scenario server_mode="" client_env=() server_env=()
case $scenario in
  fdready | chain | nopoll) mode=c2s ;;
  fail_socket) mode=c2s client_env=(TV_FAIL_SOCKET=1) ;;
  fail_connect) mode=c2s client_env=(TV_FAIL_CONNECT=1) ;;
  drop) mode=c2s client_env=(TV_DROP_AFTER=300000) ;;
  kill) mode=forever ;;
  late) mode=forklate server_env=(TV_DELAY_MS=1000) ;;
  closed_listener) mode=c2s server_mode=c2s_closed ;;
  slow_close) mode=s2c_pair server_env=(TV_SLOW_CLOSE_MS=4000) ;;
esac

start_bg server 60 env "${server_env[@]}" LD_PRELOAD="$(preload_value)" FASTSOCK_LOG=debug \
  FASTSOCK_LOG_FILE="$LOG" python3 "$here/vendor_peer.py" server "${server_mode:-$mode}"
server_out=$WORK/server.out
for ((i = 0; i < 100; i++)); do [[ -s $server_out ]] && break; sleep 0.1; done
port=$(head -1 "$server_out")
[[ $port =~ ^[0-9]+$ ]] || fail "the server printed no port: $(cat "$server_out")"
server_bg=$BG_PID

if [[ $scenario == kill ]]; then
  env "${client_env[@]}" LD_PRELOAD="$(preload_value)" FASTSOCK_LOG=debug FASTSOCK_LOG_FILE="$LOG" \
    python3 "$here/vendor_peer.py" client "$port" forever >"$WORK/client.out" 2>&1 &
  victim=$!
  for ((i = 0; i < 100; i++)); do grep -q 'sends through tv' "$LOG" && break; sleep 0.1; done
  grep -q 'sends through tv' "$LOG" || fail "the stream did not go over the link"
  sleep 0.5
  # The stats slot says vendor only now that a stream is on the link.
  "$FASTSOCK_TOOL" stat "$victim" >"$WORK/stat.out" 2>&1 || fail "fastsock stat failed: $(cat "$WORK/stat.out")"
  grep -Eq "client .* vendor " "$WORK/stat.out" || fail "fastsock stat shows no client on vendor: $(cat "$WORK/stat.out")"
  note "fastsock stat: $(grep -E 'client .* vendor ' "$WORK/stat.out" | tr -s ' ')"
  kill -9 "$victim"
  expect_bg_ok server
  grep -Eq '^end (eof|reset) total=[0-9]+ ok=True$' "$server_out" ||
    fail "the server reported: $(tail -2 "$server_out")"
  note "killed the client: the server saw $(tail -1 "$server_out")"
  note PASS
  exit 0
fi

rc=0
client_out=$WORK/client.out
if [[ $scenario == fail_connect ]]; then
  # The connection stays open a while after its stream: fastsock stat shows it on tcp,
  # with the reason.
  env "${client_env[@]}" VENDOR_PEER_LINGER=5 LD_PRELOAD="$(preload_value)" FASTSOCK_LOG=debug \
    FASTSOCK_LOG_FILE="$LOG" python3 "$here/vendor_peer.py" client "$port" "$mode" >"$client_out" 2>&1 &
  client=$!
  for ((i = 0; i < 100; i++)); do grep -q '^sent' "$client_out" && break; sleep 0.1; done
  "$FASTSOCK_TOOL" stat "$client" >"$WORK/stat.out" 2>&1 || fail "fastsock stat failed: $(cat "$WORK/stat.out")"
  grep -Eq 'client .* tcp +4194304 +0 +vendor: tv: connect\(\) failed \(Connection refused\)$' "$WORK/stat.out" ||
    fail "fastsock stat does not show the client on tcp with the reason: $(cat "$WORK/stat.out")"
  note "fastsock stat: $(grep -E 'client ' "$WORK/stat.out" | tr -s ' ')"
  wait "$client" || rc=$?
else
  timeout -k 5 60 env "${client_env[@]}" LD_PRELOAD="$(preload_value)" FASTSOCK_LOG=debug \
    FASTSOCK_LOG_FILE="$LOG" python3 "$here/vendor_peer.py" client "$port" "$mode" \
    >"$client_out" 2>&1 || rc=$?
fi
if [[ $scenario == drop ]]; then
  wait "$server_bg" 2>/dev/null
  grep -q ConnectionResetError "$client_out" || fail "the client did not see ECONNRESET: $(tail -3 "$client_out")"
  grep -Eq '^end reset total=[0-9]+ ok=True$' "$server_out" ||
    fail "the server reported: $(tail -2 "$server_out")"
  grep -q 'vendor: reset: the vendor connection failed' "$LOG" || fail "no reset reason in the log"
  note "dropped vendor connection: both ends saw ECONNRESET, the bytes before were intact"
  note PASS
  exit 0
fi
[[ $rc -eq 0 ]] || fail "the client failed: $(tail -5 "$client_out")"
expect_bg_ok server
out_of() { cat "$server_out" "$client_out"; }
case $mode in
  c2s | s2c | fork) grep -Eq '^end eof total=[0-9]+ ok=True$' <(out_of) ||
    fail "the receiver reported: $(out_of | grep end)" ;;
  forklate) grep -Eq '^end reset total=[0-9]+ ok=True$' "$server_out" ||
    fail "the receiver reported: $(grep end "$server_out")" ;;
  chat) [[ $(out_of | grep -c 'chat ok') -eq 2 ]] || fail "chat: $(out_of)" ;;
  s2c_pair) grep -Eq '^end eof total=1048576 ok=True$' "$client_out" &&
    grep -Eq '^end eof total=65536 ok=True$' "$client_out" ||
    fail "the client reported: $(grep end "$client_out")" ;;
  poll | epoll) grep -q "$mode ok" "$server_out" || fail "$mode: $(cat "$server_out")" ;;
esac
note "$(out_of | grep -E '^end|ok' | head -2 | tr '\n' ' ')"

# What carried it, from the library's log: the connection lines (with the reasons of the
# links skipped) and the fallbacks (with the stats slot's reason).
case $scenario in
  chain)
    grep -q ' on shm ' "$LOG" || fail "shm did not take the connection"
    grep -q 'sends through tv' "$LOG" && fail "the vendor link carried a connection shm should have"
    note "shm,vendor,tcp: shm took it" ;;
  fail_connect)
    why='vendor: tv: connect() failed (Connection refused)'
    grep -q 'sends through tv' "$LOG" && fail "the stream went over the link"
    grep -F "falls back to tcp ($why)" "$LOG" | grep -q . || fail "no '$why' fallback in the log"
    note "stayed on tcp: $(grep -F "$why" "$LOG" | head -1 | sed 's/.*debug: //')" ;;
  fail_socket | nopoll)
    # The client's probe found tv unusable (the built-ins are unusable here too): its
    # connection never attached, its reason is short, and `fastsock info` says why.
    case $scenario in
      fail_socket) why='tv: socket(2) failed (Network is down)' ;;
      nopoll) why="tv: $TV_NOPOLL_LIB lacks tvpoll" ;;
    esac
    grep -q 'sends through tv' "$LOG" && fail "the stream went over the link"
    grep -Eq "fd=[0-9]+ client .* on tcp \(vendor: none of its 4 profiles is usable here;" "$LOG" ||
      fail "no client 'on tcp (vendor: none of its 4 profiles is usable here' line in the log"
    env "${client_env[@]}" "$FASTSOCK_TOOL" info >"$WORK/info.out" 2>&1 || fail "fastsock info failed: $(cat "$WORK/info.out")"
    grep -E '^  vendor +yes +no ' "$WORK/info.out" | grep -qF "$why" ||
      fail "fastsock info does not say '$why': $(grep vendor "$WORK/info.out")"
    note "client on tcp; fastsock info: $(grep -E '^  vendor ' "$WORK/info.out" | tr -s ' ')" ;;
  late)
    grep -q 'sends through tv' "$LOG" || fail "the stream did not go over the link"
    grep -q 'vendor: the connection is reset: .* before the peer confirmed our switch' "$LOG" ||
      fail "the client did not refuse to leave without the server's Ack"
    grep -q 'vendor: leaves the link after' "$LOG" && fail "the client wrote a resync frame the server could not place"
    note "the client reset rather than leave unconfirmed; the server read the pattern intact up to the reset" ;;
  fork)
    grep -q 'vendor: leaves the link after' "$LOG" || fail "the client did not leave the link"
    grep -q 'the peer left the link after' "$LOG" || fail "the server did not see the resync frame" ;;
  *)
    grep -q 'sends through tv' "$LOG" || fail "the stream did not go over the link"
    # Reported on tcp while the handshake runs, on vendor only once a stream switched.
    grep -Eq "fd=[0-9]+ client .* on tcp \((.*; )?vendor: handshake under way\)" "$LOG" ||
      fail "the client's connection line does not say 'on tcp (vendor: handshake under way)'"
    grep -Eq "fd=[0-9]+ carried by vendor \(tv\)" "$LOG" || fail "no 'carried by vendor (tv)' line"
    grep -Eq "fd=[0-9]+ (client|server) .* on vendor" "$LOG" && fail "a connection was reported on vendor at attach"
    # A chat can end before its handshake does: the end that closes first then tells the
    # other it left the (still unused) link, which that end records. Any other fall-back fails.
    fell_back=$(grep 'falls back to tcp' "$LOG" |
      if [[ $scenario == chat ]]; then grep -v 'the peer left the vendor link'; else cat; fi)
    [[ -z $fell_back ]] || fail "a connection fell back: $fell_back" ;;
esac
if [[ $scenario == slow_close ]]; then
  grep -q 'did not finish ending the stream' "$LOG" &&
    fail "a close gave up waiting for the vendor stream's end: $(grep 'did not finish' "$LOG")"
  note "both connections' ends waited for the library's slow close"
fi
log_assert_no_errors
note PASS
