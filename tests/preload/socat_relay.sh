#!/usr/bin/env bash
# socat_relay.sh: a socat client sends a 4 MB random file through a socat relay
# (TCP-LISTEN -> TCP) to a socat echo server (PIPE) and writes what comes back to a file;
# first with none under the library, then with all three under it. What comes back must
# have the source's sha256, and the log must show all four connection ends (client, the
# relay's two, the echo server's). socat shuts its sockets down and exits without close(),
# so the library writes no `closed` line for them and byte counts are not checked here.
source "$(dirname "$0")/lib.sh"
init_test socat_relay
require_cmd socat sha256sum
require_preload_prefix_ok socat -V
size=$((4 * 1024 * 1024))
head -c "$size" /dev/urandom >"$WORK/in.bin"
want=$(sha256sum <"$WORK/in.bin" | cut -d' ' -f1)

relay() {  # relay plain|preload
  local tag=$1 wrap=without_fastsock echo_port relay_port got
  [[ $tag == preload ]] && wrap=under_fastsock
  echo_port=$(free_port)
  # The echo server loops the bytes through a pipe of its own, in one thread: with blocks
  # larger than a pipe page it can block forever writing into that pipe while the socket is
  # momentarily not writable (socat's own deadlock; kernel TCP's multi-megabyte send buffer
  # rarely lets it happen, an shm ring can: it grows only while its reader reads, even with
  # FASTSOCK_SHM_RING_MAX=4M this hung under ASan). 4 KiB blocks (-b 4096, PIPE_BUF) always
  # fit once select() says the pipe is writable.
  start_bg "$tag-echo" 60 $wrap socat -b 4096 -t 30 "TCP-LISTEN:$echo_port,bind=127.0.0.1,reuseaddr" PIPE
  wait_for_port "$echo_port" 15 "$BG_PID"
  relay_port=$(free_port)
  while [[ $relay_port -eq $echo_port ]]; do relay_port=$(free_port); done
  start_bg "$tag-relay" 60 $wrap socat -t 30 \
    "TCP-LISTEN:$relay_port,bind=127.0.0.1,reuseaddr" "TCP:127.0.0.1:$echo_port"
  wait_for_port "$relay_port" 15 "$BG_PID"
  # Dual address: read the file, write the echo to another file.
  run_fg "$tag-client" 60 $wrap socat -t 30 \
    "OPEN:$WORK/in.bin,rdonly!!CREATE:$WORK/$tag-out.bin" "TCP:127.0.0.1:$relay_port"
  expect_bg_ok "$tag-relay"
  expect_bg_ok "$tag-echo"
  got=$(sha256sum <"$WORK/$tag-out.bin" | cut -d' ' -f1)
  [[ $got == "$want" ]] || fail "$tag: echoed data sha256 $got != source $want ($(stat -c %s "$WORK/$tag-out.bin") bytes)"
  note "$tag: $size bytes relayed there and back, sha256 matches"
}

relay plain
relay preload
log_assert_ends_match
[[ $(grep -cE "debug: fd=[0-9]+ client .* on $OPEN_LINK" "$LOG") -eq 2 ]] ||
  fail "want 2 client connections (client -> relay, relay -> echo)"
[[ $(grep -cE "debug: fd=[0-9]+ server .* on $OPEN_LINK" "$LOG") -eq 2 ]] ||
  fail "want 2 accepted connections (relay, echo)"
note "the log shows both connections from both ends"
log_assert_no_errors
note "PASS"
