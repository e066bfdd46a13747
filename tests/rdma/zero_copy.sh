#!/usr/bin/env bash
# zero_copy.sh (runs in the Soft-RoCE VM): the verbs link's zero-copy sends and its pin-down
# cache (docs/verbs.md, "Zero-copy sends"). zcopy_reuse sends 1 MiB messages from buffers it
# then unmaps, drops the pages of (MADV_DONTNEED), moves away (mremap), and frees (glibc
# unmapping or trimming inside free), each time refilling new memory at the same address
# and sending from it again. The server checks every byte of every message: a registration
# kept for the old pages would send the old bytes.
# Then a buffer kept registered while 70 others (more than the cache's entries and than the
# sends it remembers) are each sent from twice and unmapped, after which the kept buffer's
# pages are replaced too: the span the hooks watch shrinks as entries go, and must still
# cover it. Each buffer is sent from twice before its pages change: a buffer is registered
# (and cached) from its second send on.
# Checks: all messages intact; every send from an address sent from before went zero-copy,
# and the cache both hit (the same buffer sent again) and was told of the changes; each case really reused the address
# (otherwise it proves nothing and the test says so).
#   zero_copy.sh [PROGRAM]   (default ./zcopy_reuse: meson runs it in tests/rdma's build dir)
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_zero_copy guest
require_library

prog=${1:-$PWD/zcopy_reuse}
[[ -x $prog ]] || fail "no $prog (built with the rdma tests)"
work=$(mktemp -d /tmp/fastsock-rdma-zcopy.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug

LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$work/server.log timeout 120 \
  "$prog" server "$SOFTROCE_ADDR" >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out" server
LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$work/client.log timeout 120 \
  "$prog" client "$SOFTROCE_ADDR" "$PORT" >"$work/client.out" 2>&1 ||
  fail "client exited with $? (a hang ends in timeout's 124): $(tail -3 "$work/client.out")"
wait "$server" || fail "server exited with $?: $(tail -5 "$work/server.out")"
note "client: $(tr '\n' ';' <"$work/client.out")"
note "server: $(tail -1 "$work/server.out")"

sent=$(awk '/^sent / { print $2 }' "$work/client.out")
grep -q "^checked $sent bad 0\$" "$work/server.out" ||
  fail "the server did not get all $sent messages intact: $(cat "$work/server.out")"
grep -q 'verbs: sends on the link' "$work/client.log" || fail "the client never sent on the link"
grep -q 'zero-copy sends from the application' "$work/client.log" ||
  fail "no zero-copy send: $(grep 'verbs' "$work/client.log" | tail -5)"
summary=$(grep -oE '[0-9]+ bytes sent zero-copy.*' "$work/client.log" | tail -1)
[[ -n $summary ]] || fail "no zero-copy summary at close"
note "client: $summary"
zc_bytes=${summary%% *}
# Every send after the warm-up from an address sent from before leaves zero-copy (a buffer
# is registered from its second send on), the 70 buffers at the end included.
repeats=$(awk '/^repeat-sends / { print $2 }' "$work/client.out")
((repeats >= 70 && zc_bytes >= repeats << 20)) ||
  fail "only $zc_bytes bytes went zero-copy, for $repeats sends from a buffer sent from before: $summary"
read -r hits regs inval < <(sed -E 's/.* ([0-9]+) hits, ([0-9]+) registrations, ([0-9]+) invalidated.*/\1 \2 \3/' <<<"$summary")
if grep -q 'registration cache keeps nothing' "$work/client.log"; then
  # AddressSanitizer's free comes first: every send registers afresh (and its allocator
  # does not give addresses back at once, so the malloc cases would prove nothing anyway).
  ((hits == 0 && regs > 0)) || fail "the cache is off but says: $summary"
  note "the cache keeps nothing in this process (free is not the library's); $sent messages intact"
  exit 0
fi
((hits > 0)) || fail "the cache never hit (the same buffer sent again): $summary"
((inval >= 6)) || fail "the cache was told of $inval changes, not of each case's: $summary"
for c in munmap madvise mremap malloc-mmap malloc-heap narrowed; do
  grep -q "^case $c reused yes" "$work/client.out" ||
    fail "case $c did not get the old address back, so it proves nothing: $(cat "$work/client.out")"
done
note "every case refilled the old address; $sent messages intact"
exit 0
