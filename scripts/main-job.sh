#!/usr/bin/env bash
# The main job (README.md): installs dependencies, builds, then
#  1. compares kernel TCP, Unix sockets and fastsock with fastsock-pipe in ONE interleaved
#     run, writing the table, JSON, CSV and the latency/bandwidth graphs to results/main-job/;
#  2. runs real programs (NetPIPE, iperf3, redis) over kernel TCP and under fastsock in one run and
#     prints their comparison table.
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
echo "== fastsock-pipe: kernel TCP vs Unix socket vs fastsock (interleaved, up to 1 MiB)"
results=results/main-job
mkdir -p "$results"
# Bounded: about a minute on 2 CPUs (3 trials of 30 ms per transport and size); --max-time
# stops starting new sizes after 150 s whatever the host's speed.
FASTSOCK_LIBRARY="$PWD/build/preload/libfastsock.so" \
  ./build/tools/fastsock-pipe/fastsock-pipe --local --compare tcp,unix,fastsock \
  -u 1048576 --trials 3 --trial-time 0.03 --max-time 150 \
  --json "$results/pipe.json" --csv "$results/pipe.csv" --plot "$results/pipe" |
  tee "$results/pipe-table.txt"
echo "(table, JSON, CSV and graphs in $results/)"
echo
echo "== real programs: kernel TCP vs under fastsock"
bash bench/real-programs.sh --lib "$PWD/build/preload/libfastsock.so" "$@"
