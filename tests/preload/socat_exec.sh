#!/usr/bin/env bash
# socat_exec.sh: connections that continue over exec. socat accepts a connection and, with
# EXEC's `nofork`, replaces itself with `cat` on the accepted socket (dup'ed to cat's stdin
# and stdout): no fork, so under the library the connection is on shm when the exec comes.
# A socat client sends a 4 MB random file and writes the echo to a file, which must have
# the source's sha256:
#   - without the library;
#   - all under the library: the connection continues on shm in cat (cat's library logs
#     "continues on shm after exec"), and neither end ever falls back to TCP;
#   - cat started through `env -u LD_PRELOAD`: env runs the library and adopts the
#     connection, then execs cat without it, so the connection is moved to TCP first
#     ("moved to TCP: exec") and cat reads and writes the kernel socket.
source "$(dirname "$0")/lib.sh"
init_test socat_exec
require_cmd socat sha256sum cat env
require_preload_prefix_ok socat -V
size=$((4 * 1024 * 1024))
head -c "$size" /dev/urandom >"$WORK/in.bin"
want=$(sha256sum <"$WORK/in.bin" | cut -d' ' -f1)

echo_through() {  # echo_through TAG plain|preload PROGRAM
  local tag=$1 wrap=without_fastsock program=$3 port got
  [[ $2 == preload ]] && wrap=under_fastsock
  port=$(free_port)
  start_bg "$tag-server" 60 $wrap socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" \
    "EXEC:$program,nofork"
  wait_for_port "$port" 15 "$BG_PID"
  run_fg "$tag-client" 60 $wrap socat -t 30 \
    "OPEN:$WORK/in.bin,rdonly!!CREATE:$WORK/$tag-out.bin" "TCP:127.0.0.1:$port"
  expect_bg_ok "$tag-server"
  got=$(sha256sum <"$WORK/$tag-out.bin" | cut -d' ' -f1)
  [[ $got == "$want" ]] || fail "$tag: echoed data sha256 $got != source $want ($(stat -c %s "$WORK/$tag-out.bin") bytes)"
  note "$tag: $size bytes there and back through $program, sha256 matches"
}

echo_through plain plain cat
echo_through continues preload cat
if [[ $LINK == shm ]]; then
  [[ $(grep -cE "debug: fd=0 continues on shm after exec" "$LOG") -eq 1 ]] ||
    fail "cat did not continue the connection on shm after the exec"
  if grep -E "falls back to tcp" "$LOG"; then fail "a connection fell back to TCP"; fi
  [[ $(grep -cE "debug: fd=0 closed sent=$size received=$size$" "$LOG") -eq 1 ]] ||
    fail "cat's closed line does not show $size bytes each way"
  note "the connection continued on shm in cat and carried all bytes there"
fi
: >"$LOG"
echo_through downgraded preload "env -u LD_PRELOAD cat"
if [[ $LINK == shm ]]; then
  grep -qE "debug: fd=0 continues on shm after exec" "$LOG" ||
    fail "env did not adopt the connection"
  grep -qE "debug: fd=0 falls back to tcp \(shm: moved to TCP: exec\)" "$LOG" ||
    fail "env did not move the connection to TCP before exec'ing cat without the library"
  note "env moved the connection to TCP before exec'ing cat without the library"
fi
log_assert_no_errors
note "PASS"
