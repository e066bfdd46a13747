# Helpers for the scripts of tests/rdma that run inside the Soft-RoCE VM (softroce-vm.sh) or
# on the host. Source it, then call rdma_test NAME. Exit codes follow meson: 0 pass,
# 77 skipped, anything else failed.
set -u -o pipefail

# note, skip, fail, require_cmd and TEST_NAME (set by rdma_test).
# shellcheck source=../script_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../script_lib.sh"

# rdma_test NAME [guest]: names the test; with "guest", refuses to run outside the VM.
rdma_test() {
  TEST_NAME=$1
  if [[ ${2:-} == guest ]]; then
    [[ -n ${SOFTROCE_ADDR:-} && -n ${SOFTROCE_DEV:-} ]] ||
      fail "SOFTROCE_ADDR/SOFTROCE_DEV are not set: run this through tests/rdma/run_in_vm.sh"
  fi
}

# require_library: FASTSOCK_LIB must be the library; sets PRELOAD, the LD_PRELOAD value for
# the programs run under it (in a sanitizer build the ASan runtime, FASTSOCK_PRELOAD_PREFIX,
# must come first: tests/meson.build).
require_library() {
  [[ -f ${FASTSOCK_LIB:-} ]] || fail "FASTSOCK_LIB=${FASTSOCK_LIB:-} is not the library"
  PRELOAD="${FASTSOCK_PRELOAD_PREFIX:+$FASTSOCK_PRELOAD_PREFIX }$FASTSOCK_LIB"
}

# wait_until SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds (status 0) or
# SECONDS passed (status 1).
wait_until() {
  local i tenths=$(($1 * 10))
  shift
  for ((i = 0; i < tenths; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

# server_port FILE [WHAT]: waits (up to 30 s: python starts slowly in the emulated VM, the
# more so on a busy host) for a server to write its port as FILE's first line, sets PORT.
server_port() {
  wait_until 30 test -s "$1"
  PORT=$(head -1 "$1")
  [[ $PORT =~ ^[0-9]+$ ]] || fail "${2:+$2: }the server printed no port: $(cat "$1")"
}

# transport_field NAME FIELD: prints a field of one transport from `fastsock info --json`
# (FASTSOCK_TOOL), as JSON (true, false, "text").
transport_field() {
  timeout 20 "${FASTSOCK_TOOL:?FASTSOCK_TOOL is not set}" info --json |
    python3 -c 'import json, sys
info = json.load(sys.stdin)
t = [t for t in info["transports"] if t["name"] == sys.argv[1]]
print(json.dumps(t[0].get(sys.argv[2])) if t else "missing")' "$1" "$2"
}

# running PID: the process exists and has not exited (a zombie, not yet waited for, has).
running() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) && [[ $state != Z ]]
}

# backtraces PID...: every thread's stack in each process (gdb), for a failure report: a
# stall in CI leaves nothing else behind (the guest and its /tmp are gone).
backtraces() {
  command -v gdb >/dev/null 2>&1 || { echo "(gdb is not installed: no backtraces)"; return 0; }
  local p
  for p in "$@"; do
    running "$p" || continue
    echo "--- threads of pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
    timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread )'
  done
}
