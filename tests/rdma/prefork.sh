#!/usr/bin/env bash
# prefork.sh (runs in the Soft-RoCE VM): a pre-forking server under the library with the
# verbs link — the parent listens, two forked children accept and echo — and a client that
# makes 4 connections, each sending 1 MiB and reading it back. The RDMA listener, and every
# connect request arriving on it, belongs to the parent: it must redirect each request to
# the child that accepted the connection (docs/verbs.md, fork), so every connection goes
# over verbs in both directions, every byte comes back intact, and no connection stays on
# TCP because its listener was inherited.
#
# Three rounds: `keep` (the parent keeps its listening socket), `close` (the parent closes
# it once the children are forked, as a server that hands listening to its workers does:
# its RDMA listener must stay while a child still listens) and `daemon` (as daemon(3) right
# after listen(): the listening process forks a master and exits; the master forks the
# workers, and must take the RDMA listener over once the listening process is gone) and
# `daemon_late` (the listening process lingers half a second, so the master forks its
# workers while it lives: the master watches it and takes over from its service thread when
# it exits, after the workers' forks, which that service's start came just before). After
# `close`, the parent stops its children and at once listens again on the same port,
# accepting itself: the RDMA port, still held for the children until the next check, must
# be given back for the new listener, whose connection goes over verbs too.
#
# Then `orphans`: the listening process forks two workers, which block in accept at once,
# and exits: nobody forks after it, so the worker that accepts first must take the RDMA
# listener over at that accept (its own connection may stay on TCP: its connect request may
# have come before the takeover), and the other connections go over verbs.
#
# Then nginx as Debian runs it (`daemon on`: the process that listened exits, its child is
# the master, which forks 2 workers): the master must take the RDMA listener over, and
# the client's downloads, accepted by the workers, go over verbs, their checksums right.
source "$(dirname "$0")/guest_lib.sh"
rdma_test rdma_prefork guest
require_cmd python3
require_library

work=$(mktemp -d /tmp/fastsock-rdma-prefork.XXXXXX)
export FASTSOCK_TRANSPORTS=verbs,tcp FASTSOCK_LOG=debug

cat >"$work/server.py" <<'EOF'
import os, signal, socket, sys, time
addr, done, mode = sys.argv[1], sys.argv[2], sys.argv[3]


def echo(c):
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()


ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((addr, 0))
ls.listen(8)
port = ls.getsockname()[1]
print(port, flush=True)
if mode.startswith("daemon"):
    if os.fork() != 0:
        if mode == "daemon_late":
            time.sleep(0.5)
        os._exit(0)  # as daemon(3): the listening process is gone (at once for `daemon`)
    print("master", os.getpid(), flush=True)
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        while True:  # a worker: serves until the parent stops it
            echo(ls.accept()[0])
    children.append(pid)
if mode == "orphans":
    print("workers", *children, flush=True)
    os._exit(0)  # the workers, blocked in accept, outlive the listening process
if mode == "close":
    ls.close()
# The test says when the client is done (a file): the workers are stopped then.
while not os.path.exists(done):
    time.sleep(0.1)
for pid in children:
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)
if mode == "close":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(8)
    print("relistening", flush=True)
    echo(ls.accept()[0])
EOF

ended() { ! running "$1"; }  # for wait_until, which runs a command

conns=4
# The client waits on each connection until the library carries it over verbs, so that the
# echo is not over before the redirected RDMA connection is up (slow under emulation).
echo_verbs() {  # echo_verbs LOG PORT CONNS
  local out
  out=$(LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$1 timeout 120 python3 \
    "$(dirname "$0")/echo_client.py" "$SOFTROCE_ADDR" "$2" "$3" 1048576 verbs 2>&1) ||
    fail "$mode: the client failed: $out"
  [[ $out == "$3" ]] || fail "$mode: $out of $3 connections echoed 1 MiB intact"
}

for mode in keep close daemon daemon_late; do
  log=$work/$mode.log
  rm -f "$work/done"
  LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$log timeout 120 python3 "$work/server.py" \
    "$SOFTROCE_ADDR" "$work/done" "$mode" >"$work/$mode.out" 2>&1 &
  server=$!
  server_port "$work/$mode.out" "$mode"
  port=$PORT
  if [[ $mode == daemon* ]]; then
    wait_until 30 grep -q '^master ' "$work/$mode.out" || fail "$mode: no master: $(cat "$work/$mode.out")"
    server=$(awk '$1 == "master" { print $2 }' "$work/$mode.out")
    wait_until 30 grep -q 'its RDMA listener is taken over here' "$log" ||
      fail "$mode: the master did not take the RDMA listener over: $(grep -E 'verbs|listen' "$log" | head -20)"
  fi
  start=$SECONDS
  echo_verbs "$log" "$port" "$conns"
  note "$mode: $conns connections echoed 1 MiB each, intact, through the forked children in $((SECONDS - start)) s"
  ends=$((2 * conns))
  touch "$work/done"
  if [[ $mode == close ]]; then
    wait_until 30 grep -q relistening "$work/$mode.out"
    echo_verbs "$log" "$port" 1
    ends=$((ends + 2))
  fi
  if [[ $mode == daemon* ]]; then
    wait_until 60 ended "$server" || fail "$mode: the master did not end"
  else
    wait "$server" || fail "$mode: the server failed: $(cat "$work/$mode.out")"
  fi

  ! grep -q 'inherited over fork\|no fastsock RDMA listener' "$log" ||
    fail "$mode: a connection stayed on TCP: $(grep -m1 'inherited over fork\|no fastsock RDMA listener' "$log")"
  redirects=$(grep -c 'verbs: redirected to RDMA port' "$log")
  ((redirects == conns)) ||
    fail "$mode: want $conns redirected connect requests, got $redirects: $(grep -E 'verbs|redirect' "$log" | head -20)"
  # Each client end switched; a child's end switches if its side of the RDMA connection was
  # up before its echo was over (counted, not required: the emulated device is slow).
  switched=0
  for pid in $(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ client ' "$log" | grep -oE '^fastsock\[[0-9]+' |
    grep -oE '[0-9]+' | sort -u); do
    switched=$((switched + $(grep -cE "fastsock\[$pid\] debug: fd=[0-9]+ verbs: sends on the link" "$log")))
  done
  switched_all=$(grep -c 'verbs: sends on the link' "$log")
  ((switched == ends / 2)) || fail "$mode: want the clients' $((ends / 2)) connections switched to the link, got $switched: $(grep -E 'verbs|listen' "$log" | tail -20)"
  carried=$(grep -c 'carried by verbs' "$log")
  ((carried == ends)) || fail "$mode: want $ends ends carried by verbs, got $carried"
  [[ $(grep -c 'closed sent=1048576 received=1048576' "$log") -eq $ends ]] ||
    fail "$mode: want every end closed with 1 MiB each way: $(grep closed "$log")"
  ports=$(grep -o 'redirected to RDMA port [0-9]*' "$log" | sort -u | wc -l)
  note "$mode: $redirects requests redirected (to $ports child port(s)); $switched_all of $ends directions on the link; every end closed with 1 MiB each way"
  if [[ $mode == close ]]; then
    grep -q 'its RDMA listener stays while a forked child still listens' "$log" ||
      fail "close: the parent did not hold its RDMA listener for the children: $(grep -E 'verbs' "$log" | head -20)"
    grep -q 'is closed in every process: its RDMA listener closes' "$log" ||
      fail "close: the held RDMA listener was never given back: $(grep -E 'listen' "$log" | head -20)"
    # Whether the new listener found the port still held (its check came first) or the
    # periodic check had let it go already depends on timing: noted, not required.
    if grep -q 'taken over from a listener held for children' "$log"; then
      how="taken over by the new listener at its listen()"
    else
      how="let go by the periodic check before the new listener came"
    fi
    note "close: the parent's RDMA listener was held for the children, then $how"
  fi
  if [[ $mode == daemon* ]]; then
    note "$mode: $(grep -m1 -o 'the listening process [0-9]* of port [0-9]* has exited.*' "$log")"
  fi
done

# orphans: the listening process exits, its workers accept.
mode=orphans
log=$work/$mode.log
LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$log timeout 60 python3 "$work/server.py" \
  "$SOFTROCE_ADDR" "$work/done" "$mode" >"$work/$mode.out" 2>&1 || fail "orphans: the server failed: $(cat "$work/$mode.out")"
server_port "$work/$mode.out" "$mode"
port=$PORT
read -r -a workers < <(awk '$1 == "workers" { print $2, $3 }' "$work/$mode.out")
((${#workers[@]} == 2)) || fail "orphans: no workers: $(cat "$work/$mode.out")"
echo_verbs "$log" "$port" "$conns"
kill "${workers[@]}"
for pid in "${workers[@]}"; do wait_until 30 ended "$pid" || fail "orphans: worker $pid did not end"; done
grep -q 'its RDMA listener is taken over here' "$log" ||
  fail "orphans: no worker took the RDMA listener over: $(grep -E 'verbs|listen' "$log" | head -20)"
client=$(grep -oE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ client ' "$log" | head -1 | grep -oE '[0-9]+' | head -1)
carried=$(grep -cE "fastsock\[$client\] debug: fd=[0-9]+ carried by verbs" "$log")
((carried >= conns - 1)) ||
  fail "orphans: want at least $((conns - 1)) of the client's $conns connections carried by verbs, got $carried: $(grep -E 'verbs' "$log" | head -20)"
note "orphans: $(grep -m1 -oE 'fastsock\[[0-9]+\] debug: verbs: the listening process [0-9]+ of port [0-9]+ has exited' "$log"); $carried of the client's $conns connections carried by verbs, every echo intact"

# nginx, daemon on (Debian's default). The client (http_get.py) waits until its connection
# is carried by verbs before it asks for the file: a download over before the link comes up
# rightly ends on TCP, and says nothing about the redirects.
require_cmd nginx sha256sum
log=$work/nginx.log
mkdir -p "$work/nginx/www" "$work/nginx/tmp"
head -c 1048576 /dev/urandom >"$work/nginx/www/file"
chmod a+rx "$work" "$work/nginx" "$work/nginx/www"  # the workers run as nginx's user
chmod a+r "$work/nginx/www/file"
want=$(sha256sum <"$work/nginx/www/file")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
cat >"$work/nginx/nginx.conf" <<EOF
daemon on;
master_process on;
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log info;
events { worker_connections 64; }
http {
  access_log $work/nginx/access.log;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  default_type application/octet-stream;
  server { listen $SOFTROCE_ADDR:$port; root $work/nginx/www; }
}
EOF
LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$log timeout 60 nginx -c "$work/nginx/nginx.conf" \
  -e "$work/nginx/error.log" || fail "nginx did not start: $(cat "$work/nginx/error.log")"
wait_until 30 test -s "$work/nginx/nginx.pid" || fail "nginx wrote no pid file"
master=$(cat "$work/nginx/nginx.pid")
wait_until 30 grep -q 'its RDMA listener is taken over here' "$log" ||
  fail "nginx: the master did not take the RDMA listener over: $(grep -E 'verbs|listen' "$log" | head -20)"
downloads=4
for ((i = 0; i < downloads; i++)); do
  got=$(LD_PRELOAD="$PRELOAD" FASTSOCK_LOG_FILE=$log timeout 60 python3 "$(dirname "$0")/http_get.py" \
    "$SOFTROCE_ADDR" "$port" /file verbs | sha256sum) || fail "nginx: download $i failed"
  [[ $got == "$want" ]] || fail "nginx: download $i has the wrong checksum"
done
kill "$master"
wait_until 30 ended "$master" || fail "nginx: the master did not end"
! grep -q 'inherited over fork\|no fastsock RDMA listener' "$log" ||
  fail "nginx: a connection stayed on TCP: $(grep -m1 'inherited over fork\|no fastsock RDMA listener' "$log")"
redirected=$(grep -c 'verbs: redirected to RDMA port' "$log")
((redirected == downloads)) ||
  fail "nginx: want $downloads redirected connect requests, got $redirected: $(grep -E 'verbs' "$log" | tail -30)"
carried=$(grep -cE 'fd=[0-9]+ carried by verbs' "$log")
((carried == 2 * downloads)) ||
  fail "nginx: want $((2 * downloads)) ends carried by verbs, got $carried: $(grep -E 'verbs' "$log" | tail -20)"
note "nginx (daemon on): the master took the RDMA listener over; $downloads downloads of 1 MiB, checksums right, each redirected to the worker that accepted it and carried by verbs at both ends"
note "PASS"
