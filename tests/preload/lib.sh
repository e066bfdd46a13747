# Shared helpers for the preload tests: real programs run under libfastsock.so as separate
# processes. Source it from a test script (bash), then call init_test first.
#
# Environment (set by tests/preload/meson.build):
#   FASTSOCK_LIB             path of libfastsock.so (required)
#   PROGS_DIR                where the test programs were built (required by prog tests)
#   FASTSOCK_PRELOAD_PREFIX  libraries that must come first in LD_PRELOAD (libasan in a
#                            sanitizer build), optional
#   FASTSOCK_TEST_KEEP=1     keep the work directory even when the test passes
#
# Exit codes follow meson: 0 pass, 77 skipped, anything else failed.

set -u -o pipefail

# note, skip, fail, require_cmd and TEST_NAME (set by init_test).
# shellcheck source=../script_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../script_lib.sh"

WORK=""
LOG=""                 # the FASTSOCK_LOG_FILE of this test's runs under the library
# The link a connection takes when both its ends run under the library on this host.
LINK=${FASTSOCK_TEST_LINK:-shm}
# What a connection's first log line ("fd=N client L -> P on X (reasons)") says of it, as an
# extended regular expression: a verbs connection starts on tcp while its RDMA connection
# is made (its "carried by verbs" line comes once the link has it, docs/verbs.md).
case $LINK in
  verbs) OPEN_LINK='tcp \(verbs: RDMA connection under way\)' ;;
  *) OPEN_LINK=$LINK ;;
esac
export OPEN_LINK
declare -a BG_PIDS=()  # background `timeout` wrappers started by start_bg
declare -A BG_NAMES=()

# After fail's message (script_lib.sh): the last lines of this test's library log.
fail_details() {
  if [[ -n "$LOG" && -s "$LOG" ]]; then
    printf -- '--- last lines of %s ---\n' "$LOG"
    tail -n 30 "$LOG"
  fi
}

# Kills whatever start_bg started and is still running, then removes the work directory
# (kept on failure so the logs can be read, unless WORK_DISPOSABLE=1: an expected failure).
cleanup() {
  local rc=$?
  local pid i
  # `timeout` makes itself a process-group leader: signalling the group also reaches the
  # program and anything it forked.
  for pid in "${BG_PIDS[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
  done
  for pid in "${BG_PIDS[@]}"; do
    for ((i = 0; i < 50; i++)); do
      kill -0 -- "-$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [[ -n "$WORK" && -d "$WORK" ]]; then
    if [[ $rc -eq 0 || $rc -eq 77 || ${WORK_DISPOSABLE:-0} -eq 1 ]] &&
      [[ "${FASTSOCK_TEST_KEEP:-0}" != 1 ]]; then
      rm -rf "$WORK"
    else
      printf '%s: work directory kept: %s\n' "$TEST_NAME" "$WORK"
    fi
  fi
  exit "$rc"
}

init_test() {
  TEST_NAME="$1"
  [[ -n "${FASTSOCK_LIB:-}" ]] || fail "FASTSOCK_LIB is not set (run through meson test)"
  [[ -f "$FASTSOCK_LIB" ]] || fail "FASTSOCK_LIB=$FASTSOCK_LIB does not exist"
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/fastsock-preload-$TEST_NAME.XXXXXX") ||
    fail "cannot create a work directory"
  LOG="$WORK/fastsock.log"
  : >"$LOG"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

# require_preload_prefix_ok CMD...: in a sanitizer build the ASan runtime is preloaded into
# uninstrumented programs; a program that cannot run that way at all (without fastsock
# too) cannot be tested there: skip, with the reason. CMD should be quick (e.g. --version).
require_preload_prefix_ok() {
  [[ -n "${FASTSOCK_PRELOAD_PREFIX:-}" ]] || return 0
  local rc=0
  timeout -k 2 5 env LD_PRELOAD="$FASTSOCK_PRELOAD_PREFIX" "$@" >"$WORK/prefix-probe.out" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] && return 0
  [[ $rc -eq 124 ]] && skip "'$*' hangs with only LD_PRELOAD=$FASTSOCK_PRELOAD_PREFIX (no fastsock): this program cannot run in the sanitizer build"
  skip "'$*' fails (status $rc) with only LD_PRELOAD=$FASTSOCK_PRELOAD_PREFIX (no fastsock): $(head -c 300 "$WORK/prefix-probe.out")"
}

prog() { printf '%s/%s' "${PROGS_DIR:?PROGS_DIR is not set}" "$1"; }

# The LD_PRELOAD value: the sanitizer runtime (if any) must come first.
preload_value() { printf '%s' "${FASTSOCK_PRELOAD_PREFIX:+$FASTSOCK_PRELOAD_PREFIX }$FASTSOCK_LIB"; }

# under_fastsock CMD...: runs CMD under the library the way a user does, with `fastsock
# run` (which checks its options, sets the library's variables and LD_PRELOAD, and execs
# CMD: the pid stays the program's), with debug logging into $LOG. A sanitizer runtime
# (FASTSOCK_PRELOAD_PREFIX) goes into LD_PRELOAD first; `run` appends the library after it.
under_fastsock() {
  expand_wrapper under_fastsock "$@"
  "${CMD[@]}"
}

# without_fastsock CMD...: the same command on the plain kernel (the baseline run).
without_fastsock() {
  env -u LD_PRELOAD -u FASTSOCK_LOG -u FASTSOCK_LOG_FILE "$@"
}

# start_bg and run_fg run their command under `timeout`, which cannot call shell
# functions: a leading under_fastsock/without_fastsock is turned into the same settings
# given through env(1). Sets the array CMD.
expand_wrapper() {
  CMD=("$@")
  case "${CMD[0]}" in
    under_fastsock)
      local preload=(-u LD_PRELOAD)
      [[ -z "${FASTSOCK_PRELOAD_PREFIX:-}" ]] || preload=("LD_PRELOAD=$FASTSOCK_PRELOAD_PREFIX")
      CMD=(env -u FASTSOCK_LOG -u FASTSOCK_LOG_FILE "${preload[@]}"
           "${FASTSOCK_TOOL:?FASTSOCK_TOOL is not set (run through meson test)}" run
           --lib "$FASTSOCK_LIB" --log debug --log-file "$LOG" -- "${CMD[@]:1}") ;;
    without_fastsock)
      CMD=(env -u LD_PRELOAD -u FASTSOCK_LOG -u FASTSOCK_LOG_FILE "${CMD[@]:1}") ;;
  esac
}

# start_bg NAME SECONDS [under_fastsock|without_fastsock] CMD...: starts CMD in the
# background, bounded by `timeout`, with stdout+stderr in $WORK/NAME.out. Sets BG_PID. Use wait_bg NAME to collect its status.
start_bg() {
  local name=$1 secs=$2
  shift 2
  expand_wrapper "$@"
  timeout -k 5 "$secs" "${CMD[@]}" >"$WORK/$name.out" 2>&1 &
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
  BG_NAMES[$name]=$BG_PID
}

# wait_bg NAME: waits for a start_bg process and returns its exit status (124 = timed out).
wait_bg() {
  local name=$1 rc=0
  wait "${BG_NAMES[$name]}" || rc=$?
  return "$rc"
}

# run_fg NAME SECONDS [under_fastsock|without_fastsock] CMD...: runs CMD bounded by `timeout`, output in $WORK/NAME.out;
# fails the test with the output shown if CMD does not exit 0.
run_fg() {
  local name=$1 secs=$2 rc=0
  shift 2
  expand_wrapper "$@"
  timeout -k 5 "$secs" "${CMD[@]}" >"$WORK/$name.out" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    cat "$WORK/$name.out"
    [[ $rc -eq 77 ]] && skip "$name: $(grep -m1 '^skip:' "$WORK/$name.out" || echo "exit status 77")"
    [[ $rc -eq 124 ]] && fail "$name timed out after ${secs}s: $*"
    fail "$name exited with status $rc: $*"
  fi
}

# expect_bg_ok NAME: wait_bg NAME and fail the test (showing its output) unless it exited 0.
expect_bg_ok() {
  local name=$1 rc=0
  wait_bg "$name" || rc=$?
  if [[ $rc -ne 0 ]]; then
    cat "$WORK/$name.out"
    [[ $rc -eq 124 ]] && fail "$name timed out"
    fail "$name exited with status $rc"
  fi
}

# Is anything listening on TCP port $1 (IPv4 or IPv6)? Reads /proc so that checking never
# connects: a probe connection would be taken as the real client by servers like NPtcp.
port_listening() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                   END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

port_in_use() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" 'substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 2>/dev/null
}

# free_port: prints a TCP port that nothing uses, below the ephemeral range so that an
# outgoing connection cannot take it between now and the server's bind.
free_port() {
  local i port
  for i in $(seq 1 200); do
    port=$((20000 + RANDOM % 12000))
    if ! port_in_use "$port"; then
      printf '%s' "$port"
      return 0
    fi
  done
  fail "no free TCP port found"
}

# wait_for_port PORT [SECONDS] [PID]: until something listens on PORT; fails after SECONDS
# (default 15), or at once if PID (the server) has exited.
wait_for_port() {
  local port=$1 secs=${2:-15} pid=${3:-} i
  for ((i = 0; i < secs * 20; i++)); do
    port_listening "$port" && return 0
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      fail "the server exited before listening on port $port"
    fi
    sleep 0.05
  done
  fail "nothing listening on port $port after ${secs}s"
}

# wait_for_file FILE [SECONDS] [PID]: until FILE exists and is not empty.
wait_for_file() {
  local file=$1 secs=${2:-15} pid=${3:-} i
  for ((i = 0; i < secs * 20; i++)); do
    [[ -s "$file" ]] && return 0
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      fail "the server exited before writing $file"
    fi
    sleep 0.05
  done
  fail "$file not written after ${secs}s"
}

# ---- assertions on the library's log ($LOG) -------------------------------------------

# log_count TEXT: number of log lines containing the fixed string TEXT.
log_count() { grep -cF -- "$1" "$LOG" || true; }

# wait_for_log_lines REGEX COUNT [SECONDS]: waits (default 5 s at most) until COUNT lines of
# the log match REGEX (grep -E), e.g. a server's `closed` lines, written as it notices that
# its client left, before the test stops it. Returns without failing: the assertion that
# follows says what is missing.
wait_for_log_lines() {
  local i
  for ((i = 0; i < ${3:-5} * 20; i++)); do
    [[ $(grep -cE -- "$1" "$LOG") -ge $2 ]] && return 0
    sleep 0.05
  done
  return 0
}

log_assert_contains() {
  [[ $(log_count "$1") -ge 1 ]] || fail "log has no line containing: $1"
}

log_assert_absent() {
  [[ $(log_count "$1") -eq 0 ]] || fail "log has a line containing '$1': $(grep -F -m1 -- "$1" "$LOG")"
}

# log_assert_interception: the library really intercepted this run's TCP traffic, and
# carried it on $LINK (the link two processes under the library use on this host).
log_assert_interception() {
  grep -qE "fastsock\[[0-9]+\] debug: fd=[0-9]+ client .* -> .* on $OPEN_LINK" "$LOG" ||
    fail "log has no 'client ... on $LINK' line: the library did not see a connect"
  grep -qE "fastsock\[[0-9]+\] debug: fd=[0-9]+ server .* <- .* on $OPEN_LINK" "$LOG" ||
    fail "log has no 'server ... on $LINK' line: the library did not see an accept"
  grep -qE 'fastsock\[[0-9]+\] debug: fd=[0-9]+ closed sent=[0-9]+ received=[0-9]+' "$LOG" ||
    fail "log has no 'closed sent=N received=M' line"
}

# v4_or_mapped ADDR:PORT: a regular expression for the address as an IPv4 server socket
# prints it, or as an IPv6 server socket listening on [::] does ([::ffff:a.b.c.d]:port).
v4_or_mapped() {
  local ip=${1%:*} port=${1##*:}
  if [[ $ip == \[* ]]; then  # already IPv6: only that spelling
    ip=${ip//[/\\[}
    printf '%s:%s' "${ip//]/\\]}" "$port"
    return
  fi
  ip=${ip//./\\.}
  printf '(%s|\\[::ffff:%s\\]):%s' "$ip" "$ip" "$port"
}

# log_assert_ends_match: both ends of every connection ran under the library: for each
# `client L -> P` line there is a `server P <- L` line (a server listening on [::] prints
# IPv4 addresses as [::ffff:a.b.c.d]). One pass over the log: tests make thousands.
log_assert_ends_match() {
  local n missing
  read -r n missing < <(awk '
    function norm(a) {
      if (a ~ /^\[::ffff:[0-9.]+\]:[0-9]+$/) { sub(/^\[::ffff:/, "", a); sub(/\]:/, ":", a) }
      return a
    }
    $2 == "debug:" && $8 == "on" && substr($0, index($0, " on ") + 4) ~ ("^" ENVIRON["OPEN_LINK"] "( |$)") {
      if ($4 == "client" && $6 == "->") clients[norm($5) " " norm($7)] = 1
      if ($4 == "server" && $6 == "<-") servers[norm($7) " " norm($5)] = 1
    }
    END {
      n = 0; first = ""
      for (c in clients) { n++; if (!(c in servers) && first == "") first = c }
      print n, (first == "" ? "-" : first)
    }' "$LOG")
  [[ $missing == - ]] ||
    fail "connection ${missing/ / -> } has no matching 'server ... <- ... on $LINK' line"
  [[ $n -gt 0 ]] || fail "no client lines in the log"
  note "both ends of all $n connections are in the log"
}

# log_assert_closed SENT RECEIVED: some connection closed with exactly these counts.
log_assert_closed() {
  grep -qE "debug: fd=[0-9]+ closed sent=$1 received=$2\$" "$LOG" ||
    fail "log has no 'closed sent=$1 received=$2' line; closed lines: $(grep -o 'closed sent=.*' "$LOG" | sort | uniq -c | tr '\n' ';')"
}

# log_closed_pairs: prints "SENT RECEIVED" for every closed line.
log_closed_pairs() {
  sed -nE 's/.* closed sent=([0-9]+) received=([0-9]+).*/\1 \2/p' "$LOG"
}

# log_assert_no_errors: the library reported no error while the programs ran.
log_assert_no_errors() {
  if grep -qE 'fastsock\[[0-9]+\] error:' "$LOG"; then
    fail "the library logged an error: $(grep -E -m1 'fastsock\[[0-9]+\] error:' "$LOG")"
  fi
}

# log_count_matching SPEC: number of log lines matching SPEC, where '|' separates parts that
# must all occur in the line, a part starting with '!' must not occur, and a part ending
# with '$' must end the line. All parts are fixed strings.
log_count_matching() {
  awk -v spec="$1" '
    BEGIN { n = split(spec, parts, "|") }
    {
      ok = 1
      for (i = 1; i <= n && ok; i++) {
        p = parts[i]; neg = 0; anchored = 0
        if (substr(p, 1, 1) == "!") { neg = 1; p = substr(p, 2) }
        if (substr(p, length(p), 1) == "$") { anchored = 1; p = substr(p, 1, length(p) - 1) }
        if (anchored) hit = length($0) >= length(p) && substr($0, length($0) - length(p) + 1) == p
        else hit = index($0, p) > 0
        if (hit == neg) ok = 0
      }
      if (ok) count++
    }
    END { print count + 0 }' "$LOG"
}

# check_expectations OUTPUT: the test programs print what the log must show (SPEC as in
# log_count_matching):
#   expect-log: SPEC      some log line matches (one more line per repeated expectation)
#   expect-nolog: SPEC    no log line matches
#   expect-count: N SPEC  exactly N log lines match
check_expectations() {
  local out=$1 line spec count want n=0
  declare -A seen=()
  while IFS= read -r line; do
    case "$line" in
      "expect-log: "*)
        spec=${line#expect-log: }
        seen[$spec]=$((${seen[$spec]:-0} + 1))
        count=$(log_count_matching "$spec")
        [[ $count -ge ${seen[$spec]} ]] ||
          fail "log lacks (occurrence ${seen[$spec]} of) a line matching: $spec"
        n=$((n + 1))
        ;;
      "expect-nolog: "*)
        spec=${line#expect-nolog: }
        count=$(log_count_matching "$spec")
        [[ $count -eq 0 ]] || fail "log has $count lines matching '$spec', want none"
        n=$((n + 1))
        ;;
      "expect-count: "*)
        spec=${line#expect-count: }
        want=${spec%% *}
        spec=${spec#* }
        count=$(log_count_matching "$spec")
        [[ $count -eq $want ]] || fail "log has $count lines matching '$spec', want exactly $want"
        n=$((n + 1))
        ;;
    esac
  done <"$out"
  note "$n log expectations printed by the programs hold"
}

# Both ends of a `run_pair preload` (outputs $WORK/preload-{server,client}.out) loaded the
# library and met the log expectations they printed.
assert_pair_preloaded() {
  local side
  for side in server client; do
    grep -q '^fastsock: present' "$WORK/preload-$side.out" || fail "$side did not load fastsock"
    check_expectations "$WORK/preload-$side.out"
  done
}

# ---- which ends run under the library -------------------------------------------------

# set_ends both|client-only|server-only: sets SERVER_WRAP and CLIENT_WRAP (under_fastsock or
# without_fastsock) for start_bg/run_fg.
set_ends() {
  SERVER_WRAP=without_fastsock
  CLIENT_WRAP=without_fastsock
  case $1 in
    both) SERVER_WRAP=under_fastsock; CLIENT_WRAP=under_fastsock ;;
    client-only) CLIENT_WRAP=under_fastsock ;;
    server-only) SERVER_WRAP=under_fastsock ;;
    *) fail "set_ends: unknown mode '$1'" ;;
  esac
}

# log_assert_stayed_tcp client-only|server-only: with one end alone under the library, its
# connections stayed on TCP, none on shm or on $LINK, and (when the link under test is shm)
# each with the reason recorded.
log_assert_stayed_tcp() {
  local side reason n total
  case $1 in
    client-only) side=client; reason='no fastsock listener' ;;
    server-only) side=server; reason='no fastsock dialer for this connection' ;;
    *) fail "log_assert_stayed_tcp: unknown mode '$1'" ;;
  esac
  # With FASTSOCK_TEST_LINK=tcp the library never tries shm: there is no reason to check.
  [[ $LINK == shm ]] || reason=''
  # The verbs link decides after the TCP connect (docs/verbs.md): its connections are
  # "on verbs" until the RDMA connection is refused or never comes. What must hold is that
  # none was ever established, and that a refused one says so.
  if [[ $LINK == verbs ]]; then
    ! grep -q "verbs: RDMA connection established" "$LOG" ||
      fail "$1: an RDMA connection was established with only one end under the library"
    ! grep -q "verbs: sends on the link" "$LOG" || fail "$1: a direction switched to the RDMA link"
    if [[ $side == client ]] && ! grep -qE "falls back to tcp \(verbs: .*rejected" "$LOG"; then
      fail "$1: no client connection recorded why it stayed on tcp (rejected)"
    fi
    note "$1: no RDMA connection established; every connection stayed on tcp"
    return 0
  fi
  n=$(grep -cE "debug: fd=[0-9]+ $side .* on tcp${reason:+ \(shm: $reason}" "$LOG" || true)
  [[ $n -ge 1 ]] || fail "$1: no '$side ... on tcp${reason:+ (shm: $reason}' line in the log"
  total=$(grep -cE "debug: fd=[0-9]+ $side .* on " "$LOG" || true)
  [[ $n -eq $total ]] ||
    fail "$1: $total $side lines in the log, only $n on tcp${reason:+ with '$reason'}"
  # Neither on shm nor on the link under test (when that is not tcp itself).
  local fast=shm
  [[ $LINK == shm || $LINK == tcp ]] || fast="(shm|$LINK)"
  if grep -qE "debug: fd=[0-9]+ (client|server) .* on $fast" "$LOG"; then
    fail "$1: a connection went on a fast link: $(grep -m1 -E "debug: fd=[0-9]+ (client|server) .* on $fast" "$LOG")"
  fi
  note "$1: $n ${side} connections stayed on tcp${reason:+ ($reason)}"
}

# one_end_reason client-only|server-only: prints the reason `fastsock stat` gives for a
# connection of the one end under the library (it stayed on TCP), or, with status 1, why
# it cannot be checked at a given moment.
one_end_reason() {
  case "$LINK:$1" in
    shm:client-only) echo 'shm: no fastsock listener' ;;
    shm:server-only) echo 'shm: no fastsock dialer for this connection' ;;
    verbs:*)
      # The verbs link decides after the TCP connect: until the RDMA connect request is
      # refused (connector) or given up after 5 s (acceptor), the reason is "verbs: RDMA
      # connection under way", then why it stayed; on tcp either way (before, such a
      # connection was reported on verbs until then).
      echo 'verbs: ' ;;
    *) echo "no known reason for $LINK"; return 1 ;;
  esac
}

# stat_assert_conns PID LINK [REASON]: what the process publishes for `fastsock stat`
# (/dev/shm/fastsock-stats.PID, read by the tool a user would run): at least one connected
# socket, every one on LINK and, when REASON is given, each with it in its "why not a
# faster link" column. PID may be a start_bg process (`timeout`): the program is the first
# of its descendants with a stats file (env and `fastsock run` exec in place, but under a
# sanitizer the program's pid was a grandchild of `timeout` in the VM).
stat_assert_conns() {
  local pid=$1 link=$2 reason=${3:-} out child
  for _ in 1 2 3 4 5; do
    [[ -e /dev/shm/fastsock-stats.$pid ]] && break
    child=$(pgrep -P "$pid" | head -1)
    [[ -n $child ]] || break
    pid=$child
  done
  out=$("$FASTSOCK_TOOL" stat "$pid" --json 2>&1) || fail "fastsock stat $pid: $out"
  out=$(python3 -c '
import json, sys
link, reason = sys.argv[1], sys.argv[2]
doc = json.load(sys.stdin)
conns = [c for c in doc["connections"] if c["role"] != "listener"]
if not conns:
    sys.exit("no connected socket in the stats")
for c in conns:
    if c["transport"] != link or reason not in c["reason"]:
        sys.exit("fd %(fd)s %(role)s %(local)s -> %(peer)s on %(transport)s (%(reason)s)" % c + ", want " + link + " " + reason)
print(len(conns), doc["program"])
' "$link" "$reason" <<<"$out" 2>&1) || fail "fastsock stat $pid: $out"
  note "fastsock stat $pid: $out: every connected socket on $link${reason:+ ($reason)}"
}

# log_assert_all_on_link: with both ends under the library, every connection in the log
# (each end's client or server line) is on $LINK, none stayed behind on another link.
# Sets LINK_CONNS to the number of connections.
log_assert_all_on_link() {
  local total on_link
  total=$(grep -cE "debug: fd=[0-9]+ client .* on " "$LOG" || true)
  on_link=$(grep -cE "debug: fd=[0-9]+ client .* on $OPEN_LINK( |\$)" "$LOG" || true)
  [[ $total -ge 1 ]] || fail "no client lines in the log"
  [[ $on_link -eq $total ]] ||
    fail "$((total - on_link)) of $total connections not on $LINK: $(grep -E "debug: fd=[0-9]+ (client|server) .* on " "$LOG" | grep -vE " on $LINK( |\$)" | head -3)"
  [[ $(grep -cE "debug: fd=[0-9]+ server .* on " "$LOG") -eq \
     $(grep -cE "debug: fd=[0-9]+ server .* on $OPEN_LINK( |\$)" "$LOG") ]] ||
    fail "a server line is not on $LINK: $(grep -E "debug: fd=[0-9]+ server .* on " "$LOG" | grep -vE " on $LINK( |\$)" | head -3)"
  # A verbs connection starts on TCP ("RDMA connection under way" on its first line); the
  # link carries bytes once it is established and a direction switched: the log must show
  # both, and that the library reported it so.
  if [[ $LINK == verbs ]]; then
    grep -q "verbs: RDMA connection established" "$LOG" || fail "no RDMA connection was established"
    grep -q "carried by verbs" "$LOG" || fail "no connection was reported carried by verbs"
    grep -q "verbs: sends on the link" "$LOG" || fail "no direction switched to the RDMA link"
    ! grep -E "falls back to tcp \(verbs: broken" "$LOG" | grep -q . ||
      fail "a verbs connection broke: $(grep -m1 'verbs: broken' "$LOG")"
  fi
  LINK_CONNS=$total
}

# write_nginx_conf DIR PORT ROOT WORKERS: an nginx configuration in DIR/nginx.conf that keeps
# every file nginx writes inside DIR and serves ROOT on 127.0.0.1:PORT (access log in
# DIR/access.log, sendfile on). WORKERS 0: one process (master_process off); N: a master
# and N workers (a pre-fork server).
write_nginx_conf() {
  local dir=$1 port=$2 root=$3 workers=$4 master=on
  [[ $workers -gt 0 ]] || { master=off; workers=1; }
  mkdir -p "$dir/tmp"
  cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process $master;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log info;
events { worker_connections 256; }
http {
  access_log $dir/access.log;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  default_type application/octet-stream;
  sendfile on;
  server {
    listen 127.0.0.1:$port;
    root $root;
  }
}
EOF
}
