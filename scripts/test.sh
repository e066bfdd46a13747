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
