#!/usr/bin/env bash
# The main job (README.md): installs dependencies, builds, then runs real programs (NetPIPE,
# iperf3) over kernel TCP and under fastsock in one run and prints the comparison table.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

fastsock_install_deps
echo "== build"
fastsock_build build >/dev/null
echo
echo "== what this host can use (fastsock info)"
./build/tools/fastsock/fastsock info
echo
echo "== real programs: kernel TCP vs under fastsock"
bash bench/real-programs.sh --lib "$PWD/build/preload/libfastsock.so" "$@"
