#!/usr/bin/env bash
# The test command (README.md, .ci/run): installs dependencies, builds twice — a normal
# build and an ASan+UBSan build — and runs every test suite in both (the fuzz and bench
# suites in the normal build only).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

fastsock_install_deps
# The tests run the programs this script installs: Debian's directories come first, before
# any shim a developer's PATH puts ahead of them (pyenv's python3 starts a shell script and a
# few programs per call; inside the rdma suite's emulated VM that is seconds per start).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

# Each phase's heading carries the wall-clock time, so that a log shows where the time went
# (.ci/run has 90 minutes).
phase() { echo "== $* ($(date -u +%T) UTC)"; }

phase "build (debugoptimized)"
fastsock_build build
phase "tests: unit, fuzz, preload, bench smoke"
meson test -C build --print-errorlogs --suite unit --suite fuzz --suite preload --suite bench --suite api

# Most machines start programs with a soft RLIMIT_NOFILE below the hard one (Debian: 1,024
# soft), where the library keeps its descriptors above the soft limit (docs/shm.md, "Above
# the limit"). A machine whose soft limit is its hard one never takes that path above, so
# there the host suites run once more with the soft limit at 1,024.
soft_nofile=$(ulimit -Sn) hard_nofile=$(ulimit -Hn)
if [[ $soft_nofile == "$hard_nofile" && ($hard_nofile == unlimited || $hard_nofile -gt 2048) ]]; then
  phase "tests: unit, preload, api with the soft descriptor limit at 1024 (hard: $hard_nofile)"
  prlimit --nofile=1024:"$hard_nofile" \
    meson test -C build --print-errorlogs --suite unit --suite preload --suite api
else
  phase "skipped: a second host pass with a lower soft descriptor limit (soft $soft_nofile, hard $hard_nofile: the pass above already had room above the soft limit, or there is none)"
fi

phase "tests: rdma (Soft-RoCE VM; skipped when the VM cannot start here)"
meson test -C build --print-errorlogs --suite rdma

phase "build (ASan + UBSan)"
fastsock_build build-san -Db_sanitize=address,undefined -Db_lundef=false
phase "tests under sanitizers: unit, preload"
# Leaks in the host programs (python, curl, ...) are theirs, not ours: the preload tests set
# their own ASAN_OPTIONS; the unit tests keep leak detection on.
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-san --print-errorlogs --suite unit --suite preload --suite api
phase "tests under sanitizers: rdma (the verbs code under ASan, in the Soft-RoCE VM)"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-san --print-errorlogs --suite rdma

phase "all tests passed"
