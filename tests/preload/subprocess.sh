#!/usr/bin/env bash
# subprocess.sh: a Python server under the library that runs subprocess.run between
# requests (CPython starts those children with vfork), with an epoll (selectors) loop over
# two connections to a Python client under the library (tests/preload/subprocess_pair.py).
#   - `subprocess.run(["true"])` twice: the child inherits neither connection (Python's
#     sockets are close-on-exec), so both stay on shm; before, vfork moved every connection
#     of the process to TCP, as fork does.
#   - `subprocess.run(["head", "-c", "8"], stdin=conn, stdout=conn)`: the child dups the
#     connection onto its stdin and stdout and execs head, which echoes the client's next
#     message itself; the waiting parent moved that connection to TCP first (at the child's
#     request), its unread bytes included. The other connection stays on shm.
# Every message is checked by the client; the server's epoll loop must keep reporting both.
source "$(dirname "$0")/lib.sh"
init_test subprocess
require_cmd head
py=/usr/bin/python3
[[ -x $py ]] || skip "$py is not installed"
require_preload_prefix_ok "$py" -c pass
require_preload_prefix_ok head --version
pair="$(dirname "$0")/subprocess_pair.py"

run_pair() {
  local wrap=$1 name=$2
  rm -f "$WORK/$name.port"
  start_bg "$name-server" 60 "$wrap" "$py" "$pair" server "$WORK/$name.port"
  wait_for_file "$WORK/$name.port" 15 "$BG_PID"
  run_fg "$name-client" 40 "$wrap" "$py" "$pair" client "$(cat "$WORK/$name.port")"
  expect_bg_ok "$name-server"
  note "$name: $(cat "$WORK/$name-client.out")"
}

run_pair without_fastsock plain
run_pair under_fastsock preload

# Which server descriptors: the two accepted connections, in the server's pid.
server_pid=$(grep -m1 -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ listen' "$LOG" | grep -oE '[0-9]+' | head -1)
[[ -n $server_pid ]] || fail "no listen line of the server in the log"
mapfile -t server_fds < <(grep -oE "fastsock\[$server_pid\] debug: fd=[0-9]+ server .* on $OPEN_LINK" "$LOG" |
                          grep -oE 'fd=[0-9]+' | cut -d= -f2)
[[ ${#server_fds[@]} -eq 2 ]] ||
  fail "want the server's 2 connections on $LINK, the log has ${#server_fds[@]}: $(grep -E 'debug: fd=[0-9]+ server' "$LOG" | head -3)"
moved=0
for fd in "${server_fds[@]}"; do
  line=$(grep -E "fastsock\[$server_pid\] debug: fd=$fd falls back to tcp" "$LOG" || true)
  case $line in
    "") ;;
    *"vfork (the exec'd program inherits it)"*) moved=$((moved + 1)) ;;
    *) fail "server fd=$fd left $LINK for another reason: $line" ;;
  esac
done
[[ $moved -eq 1 ]] ||
  fail "want exactly the connection handed to head moved to TCP at its vfork, got $moved"
note "the connection given to head moved to TCP at the child's exec; the other stayed on $LINK across 3 subprocess.run calls"
log_assert_no_errors
note "PASS"
