#!/usr/bin/env bash
# link_delete.sh (runs in the Soft-RoCE VM): the RDMA device is deleted (`rdma link delete`)
# while a connection streams over verbs. Both ends run under the library with
# FASTSOCK_TRANSPORTS=verbs,tcp. The connection must go on over TCP with every byte intact,
# in order, nothing lost or duplicated (docs/verbs.md, "Failure"). Three situations:
#   c2s   the client streams a byte pattern to the server,
#   s2c   the server streams it to the client,
#   echo  the client sends 64 KiB messages that the server echoes (both directions on the
#         link, each end waiting in recv while the other resends).
# The streaming end goes on until told to stop (a file), a few seconds after the device is
# gone, then shuts its side down; the receiving end counts and checks every byte.
# The deletion itself must finish while both programs run on: the kernel completes it only
# once every process has closed the device, so this checks that the library lets go of
# everything it held there. A second RDMA device ("spare", on veth1) stays throughout:
# librdmacm (44) lets go of a removed device only when a rescan finds some device left
# (docs/verbs.md, "Failure"); without one, the deletion waits for the programs to exit.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_link_delete guest
require_cmd python3
require_cmd rdma
require_library

work=$(mktemp -d /tmp/fastsock-rdma-linkdel.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug

cat >"$work/peer.py" <<'EOF'
# peer.py server ADDR MODE STOPFILE | client ADDR PORT MODE STOPFILE: see link_delete.sh.
import os, socket, sys
from pattern_stream import accept_one, echo, expected, receive, stream_until
role, addr, mode, stop = sys.argv[1], sys.argv[2], sys.argv[-2], sys.argv[-1]

def echo_client(s):  # a message, its echo checked, until told to stop
    total, ok, told = 0, True, False
    try:
        while not os.path.exists(stop):
            msg = expected(total, 65536)
            s.sendall(msg)
            back = b""
            while len(back) < len(msg):
                b = s.recv(len(msg) - len(back))
                if not b:
                    raise ConnectionError("end of stream inside an echo")
                back += b
            ok = ok and back == msg
            total += len(msg)
            if total >= 4 << 20 and not told:
                print("threshold", flush=True)
                told = True
        s.shutdown(socket.SHUT_WR)
        end = "eof" if s.recv(1) == b"" else "extra-bytes"
    except OSError as e:
        end = "error:" + (e.strerror or str(e))
    print(f"end {end} total={total} ok={ok}", flush=True)

# (server's part, client's part) of each situation.
roles = {"c2s": (lambda s: receive(s, 4 << 20), lambda s: stream_until(s, stop)),
         "s2c": (lambda s: stream_until(s, stop), lambda s: receive(s, 4 << 20)),
         "echo": (echo, echo_client)}[mode]
if role == "server":
    roles[0](accept_one(addr))
else:
    roles[1](socket.create_connection((addr, int(sys.argv[3]))))
EOF
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd)  # pattern_stream.py

netdev=$(rdma link show "$SOFTROCE_DEV/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
[[ -n $netdev ]] || fail "cannot tell which network device $SOFTROCE_DEV is on: $(rdma link show)"
spare_netdev=veth1  # the other end of the VM's veth pair (softroce-vm.sh)
rdma link add spare type rxe netdev "$spare_netdev" ||
  fail "cannot create a second RDMA device on $spare_netdev: $(rdma link show)"
pids=""
trap 'kill -9 $pids 2>/dev/null' EXIT

# scenario MODE: runs one situation, deletes the device mid-stream, checks, re-adds it.
scenario() {
  local mode=$1 log=$work/$1.log stop=$work/$1.stop port server client receiver sender i
  export FASTSOCK_LOG_FILE=$log
  LD_PRELOAD="$PRELOAD" python3 "$work/peer.py" server "$SOFTROCE_ADDR" "$mode" "$stop" \
    >"$work/$mode-server.out" 2>&1 &
  server=$!
  server_port "$work/$mode-server.out" "$mode"
  port=$PORT
  LD_PRELOAD="$PRELOAD" python3 "$work/peer.py" client "$SOFTROCE_ADDR" "$port" "$mode" "$stop" \
    >"$work/$mode-client.out" 2>&1 &
  client=$!
  pids="$server $client"
  receiver=$work/$mode-server.out sender=$work/$mode-client.out
  [[ $mode == c2s ]] || receiver=$work/$mode-client.out sender=$work/$mode-server.out
  for ((i = 0; i < 600; i++)); do grep -q threshold "$receiver" && break; sleep 0.1; done
  grep -q threshold "$receiver" || fail "$mode: the stream did not get going: $(cat "$receiver")"
  [[ $(grep -c 'verbs: RDMA connection established' "$log") -ge 2 ]] ||
    fail "$mode: the connection is not up over RDMA: $(cat "$log")"
  grep -q 'verbs: sends on the link' "$log" || fail "$mode: nothing went over the link: $(cat "$log")"

  local uverbs before_fds
  uverbs=""  # the device's verbs file, as the programs' descriptors name it
  for i in /sys/class/infiniband_verbs/uverbs*; do
    [[ $(cat "$i/ibdev") == "$SOFTROCE_DEV" ]] && uverbs=$(basename "$i")
  done
  [[ -n $uverbs ]] || fail "no verbs device file for $SOFTROCE_DEV"
  before_fds=$(ls -l /proc/"$server"/fd /proc/"$client"/fd 2>/dev/null | grep -c "/dev/infiniband/$uverbs\b")
  # The deletion finishes only once nothing holds the device: not a moment may it wait
  # for the programs, which run on.
  rdma link delete "$SOFTROCE_DEV" &
  local deleter=$!
  for ((i = 0; i < 600; i++)); do kill -0 "$deleter" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$deleter" 2>/dev/null; then
    ls -l /proc/"$server"/fd /proc/"$client"/fd >&2
    fail "$mode: rdma link delete still waits after 60 s: a program holds the device"
  fi
  wait "$deleter" || fail "$mode: rdma link delete failed"
  kill -0 "$server" "$client" || fail "$mode: an end died with the device"
  # Nothing of the deleted device is left in either program (it held $before_fds
  # descriptors of it before).
  if ls -l /proc/"$server"/fd /proc/"$client"/fd | grep -q "/dev/infiniband/$uverbs\b"; then
    fail "$mode: a program still holds the deleted device: $(ls -l /proc/"$server"/fd /proc/"$client"/fd | grep infiniband)"
  fi
  sleep 3  # the stream goes on over TCP meanwhile
  touch "$stop"
  for ((i = 0; i < 1200; i++)); do grep -q '^end ' "$receiver" && break; sleep 0.1; done
  local end sent
  end=$(grep '^end ' "$receiver") ||
    fail "$mode: no end of stream within 120 s after the stop (a hang): $(tail -3 "$receiver") $(tail -20 "$log")"
  wait "$client" || fail "$mode: the client exited with $?: $(cat "$work/$mode-client.out")"
  wait "$server" || fail "$mode: the server exited with $?: $(cat "$work/$mode-server.out")"
  [[ $end =~ ^end\ eof\ total=([0-9]+)\ ok=True$ ]] ||
    fail "$mode: the receiver reported: $end (want eof, every byte the pattern); log: $(tail -20 "$log")"
  if [[ $mode != echo ]]; then
    sent=$(sed -n 's/^sent //p' "$sender")
    [[ ${BASH_REMATCH[1]} == "$sent" ]] ||
      fail "$mode: $sent bytes sent, ${BASH_REMATCH[1]} received (lost or duplicated bytes)"
  fi
  grep -q 'verbs: the link failed' "$log" ||
    fail "$mode: no end saw the link fail (did the device go after the stream?): $(cat "$log")"
  [[ $(grep -c 'falls back to tcp' "$log") -ge 2 ]] ||
    fail "$mode: both ends must record their move to TCP: $(cat "$log")"
  note "$mode: ${BASH_REMATCH[1]} bytes intact across the device's removal (deleted while the programs ran; they held $before_fds descriptors of it before, none after); $(grep -h 'link failed' "$log" | sed 's/^fastsock\[[0-9]*\] debug: //' | sort -u | tr '\n' ';')"
  rdma link add "$SOFTROCE_DEV" type rxe netdev "$netdev" ||
    fail "cannot re-create $SOFTROCE_DEV on $netdev for the next situation"
}

scenario c2s
scenario s2c
scenario echo
note "PASS"
