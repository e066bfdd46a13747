#!/usr/bin/env bash
# run_in_vm.sh: runs one test script inside the Soft-RoCE VM (softroce-vm.sh) and reports
# its result to meson.
#
#   tests/rdma/run_in_vm.sh [--timeout SECONDS] [--needs-verbs] SCRIPT [ARGS...]
#
# SCRIPT runs in the guest with this process's environment (FASTSOCK_LIB, PROGS_DIR,
# FASTSOCK_TOOL, FASTSOCK_TRANSPORTS, FASTSOCK_TEST_LINK, ... as meson sets them; see
# softroce-vm.sh for which variables cross into the guest), from the current directory,
# which the guest can write to. The guest's /tmp is lost at power-off: when SCRIPT fails,
# the work directories it kept there (/tmp/fastsock-*) are copied to ./artifacts/NAME/.
#
# Exit status: SCRIPT's own (0 pass, 77 skipped, else failed); 77 with the reason when the VM
# cannot start here (no qemu, no kernel image, ...) or when --needs-verbs is given and the
# build has no verbs transport (FASTSOCK_HAVE_VERBS=0); 1 when the VM timed out.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ ${1:-} == --in-guest ]]; then
  # Guest side: run the script, keep its work directories if it failed.
  shift
  name=$1
  shift
  rc=0
  timeout -k 5 "${RDMA_SCRIPT_TIMEOUT:-600}" bash "$@" || rc=$?
  # 125 is reserved for "the VM could not start" (reported as skipped): a script's own 125
  # is a failure.
  [[ $rc -eq 125 ]] && rc=1
  if [[ $rc -ne 0 && $rc -ne 77 ]] && compgen -G '/tmp/fastsock-*' >/dev/null; then
    mkdir -p "artifacts/$name" && cp -a /tmp/fastsock-* "artifacts/$name/" 2>/dev/null &&
      echo "run_in_vm: the guest's work directories are in $PWD/artifacts/$name/"
  fi
  exit "$rc"
fi

timeout_s=300
needs_verbs=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --needs-verbs) needs_verbs=1; shift ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: run_in_vm.sh [--timeout S] [--needs-verbs] SCRIPT [ARGS...]" >&2; exit 2; }
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
name=$(basename "$script" .sh)${1:+-$1}

if [[ $needs_verbs == 1 && ${FASTSOCK_HAVE_VERBS:-1} == 0 ]]; then
  echo "run_in_vm: SKIP: this build has no verbs transport (meson -Dverbs=disabled, or libibverbs-dev/librdmacm-dev missing)"
  exit 77
fi

out=$(mktemp "${TMPDIR:-/tmp}/run_in_vm.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT
rm -rf "artifacts/$name"
start=$SECONDS
# The script's own bound is a little shorter than the VM's, which includes the boot.
SOFTROCE_WORKDIR=$(cd "$here/../.." && pwd) RDMA_SCRIPT_TIMEOUT=$((timeout_s - 30)) "$here/softroce-vm.sh" --timeout "$timeout_s" \
  --env RDMA_SCRIPT_TIMEOUT -- bash "$here/run_in_vm.sh" --in-guest "$name" "$script" "$@" 2>&1 |
  tee "$out"
rc=${PIPESTATUS[0]}
echo "run_in_vm: $name: exit status $rc after $((SECONDS - start)) s in the VM (boot included)"
case $rc in
  125)
    echo "run_in_vm: SKIP: the Soft-RoCE VM cannot start here:" \
      "$(sed -n 's/.*cannot start the VM: //p' "$out" | tail -1)"
    exit 77 ;;
  124)
    echo "run_in_vm: FAIL: $name did not finish in time"
    exit 1 ;;
esac
exit "$rc"
