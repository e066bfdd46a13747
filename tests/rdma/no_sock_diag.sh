#!/usr/bin/env bash
# no_sock_diag.sh (runs in the Soft-RoCE VM): the shm link on a kernel without
# NETLINK_SOCK_DIAG for TCP. The VM's kernel (Debian's) has it as modules, inet_diag and
# tcp_diag, which this script keeps from loading; the host's kernel may have it built in,
# so this is the only place the case runs for real (docs/shm-rendezvous.md, "Which hello
# is this connection's": an acceptor that runs before the connector's where asks sock_diag).
#   1. The rendezvous unit case tagged [nodiag] ("without TCP sock_diag, a connector
#      accepted before its where waits for it": its where 300 ms late is waited for with
#      a 5 s wait, not with the transport's 10 ms; it skips on a kernel that answers, so
#      here it must pass).
#   2. A real program under the library, both ends on one CPU (where the acceptor usually
#      runs inside the connector's connect, before its where): 20 connections with
#      FASTSOCK_TRANSPORTS=shm,tcp, each echoing 256 KiB intact; every connection is on shm
#      or on TCP with the sock_diag reason, nothing else, and at least 15 on shm (the
#      acceptor waits for the late wheres; without that wait all 20 stayed on TCP).
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_no_sock_diag guest
require_cmd python3 taskset modprobe
require_library

unit=$PROGS_DIR/../unit/shm_rendezvous_tests
[[ -x $unit ]] || fail "no rendezvous unit tests at $unit"

# Keep the modules out: modprobe runs these instead of loading them (the kernel asks
# modprobe when the first NETLINK_SOCK_DIAG request for TCP comes). The root is an overlay
# on a tmpfs, so this is the VM's alone.
mkdir -p /etc/modprobe.d
printf 'install inet_diag /bin/false\ninstall tcp_diag /bin/false\n' >/etc/modprobe.d/fastsock-no-sock-diag.conf
for m in tcp_diag inet_diag; do
  if grep -q "^$m " /proc/modules; then
    modprobe -r "$m" 2>/dev/null || fail "$m is loaded and cannot be removed"
  fi
done
grep -qE '^(inet_diag|tcp_diag) ' /proc/modules && fail "sock_diag for TCP is still loaded"
note "inet_diag and tcp_diag kept from loading"

out=$(timeout 120 "$unit" "[nodiag]" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "the unit case did not pass (status $rc): $out"
grep -qE '^(inet_diag|tcp_diag) ' /proc/modules &&
  fail "the kernel loaded sock_diag for TCP after all: the unit case proves nothing"
note "unit case: $(grep -E 'test cases|assertions' <<<"$out" | tr -s ' ' | paste -sd ';')"

work=$(mktemp -d /tmp/fastsock-rdma-nodiag.XXXXXX)
log=$work/fastsock.log
export FASTSOCK_TRANSPORTS=shm,tcp FASTSOCK_LOG=debug FASTSOCK_LOG_FILE=$log
conns=20
cat >"$work/server.py" <<'EOF'
import socket, sys
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(64)
print(ls.getsockname()[1], flush=True)
for _ in range(int(sys.argv[1])):
    c, _ = ls.accept()
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
EOF
LD_PRELOAD="$PRELOAD" timeout 120 taskset -c 0 python3 "$work/server.py" "$conns" >"$work/server.out" 2>&1 &
server=$!
server_port "$work/server.out"
out=$(LD_PRELOAD="$PRELOAD" timeout 120 taskset -c 0 python3 "$(dirname "$0")/echo_client.py" \
  127.0.0.1 "$PORT" "$conns" $((256 << 10)) 2>&1) ||
  fail "the client failed: $out"
[[ $out == "$conns" ]] || fail "$out of $conns connections echoed intact"
wait "$server" || fail "the server failed: $(cat "$work/server.out")"
note "$conns connections echoed 256 KiB each, intact"

lines=$(grep -E 'debug: fd=[0-9]+ (client|server) .* on ' "$log")
[[ $(grep -c ' server ' <<<"$lines") -eq $conns && $(grep -c ' client ' <<<"$lines") -eq $conns ]] ||
  fail "want $conns client and $conns server lines in the log: $lines"
other=$(grep -vE ' on shm( |$)| on tcp \(.*NETLINK_SOCK_DIAG for TCP unavailable' <<<"$lines")
[[ -z $other ]] || fail "connections neither on shm nor on TCP for want of sock_diag: $other"
on_tcp=$(grep -c ' server .* on tcp ' <<<"$lines")
note "server ends: $((conns - on_tcp)) on shm, $on_tcp on TCP for want of sock_diag"
[[ $on_tcp -eq 0 ]] || note "e.g. $(grep -m1 ' server .* on tcp ' <<<"$lines" | sed 's/.*debug: //')"
((conns - on_tcp >= 15)) || fail "only $((conns - on_tcp)) of $conns on shm: the late wheres were not waited for"
note "PASS"
