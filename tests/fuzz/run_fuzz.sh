#!/bin/sh
# Builds a libFuzzer target with clang++ and runs a bounded campaign. Shared by every fuzz
# test of the project (tests/fuzz/meson.build lists them: the configuration parser, the shm
# rendezvous messages, the shm segment's rings and descriptors, FASTSOCK_EXEC_LINKS and the
# exec token; tools/fastsock: the stats decoder of `fastsock stat`).
#
#   run_fuzz.sh NAME SECONDS MAX_LEN CORPUS|- DICT|- -- CLANG_ARGS...
#
# CLANG_ARGS are the harness, the sources it needs and -I flags. SECONDS may be overridden
# by $FUZZ_SECONDS. Exit status: 0 clean, 1 crash / invariant failure / build error, 77
# skipped (no clang++ or no libFuzzer runtime here; the reason is printed). The campaign
# runs on a copy of the seed corpus in a temporary directory, so the source tree is never
# modified; on a failure that directory (log and crash input) is kept and its path printed.
set -eu

[ $# -ge 6 ] && [ "$6" = "--" ] || {
  echo "usage: run_fuzz.sh NAME SECONDS MAX_LEN CORPUS|- DICT|- -- CLANG_ARGS..." >&2; exit 1; }
name=$1 seconds=${FUZZ_SECONDS:-$2} max_len=$3 corpus=$4 dict=$5
shift 6
cxx=${CLANGXX:-clang++}

case $seconds in
  ''|*[!0-9]*) echo "run_fuzz.sh: invalid time '$seconds' (expected whole seconds)" >&2; exit 1 ;;
esac

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "SKIP: $cxx not found (install clang and libclang-rt-14-dev to fuzz)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fastsock-fuzz-$name.XXXXXX")
keep=0
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; fi; }
trap cleanup EXIT
trap 'exit 1' INT TERM

# A missing fuzzer runtime (libclang-rt-*-dev) is an environment limit, not a failure:
# probe it with a trivial target before building the real one.
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' \
  >"$work/probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$work/probe.cc" -o "$work/probe" \
    >"$work/probe.log" 2>&1; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing?):"
  sed 's/^/  /' "$work/probe.log" | head -5
  exit 77
fi

if ! "$cxx" -std=c++20 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -Wall -Wextra "$@" -o "$work/fuzzer"; then
  echo "FAIL: could not build the $name fuzzer with $cxx"
  exit 1
fi

if [ "$corpus" = - ]; then mkdir "$work/corpus"; else cp -R "$corpus" "$work/corpus"; fi
dict_arg=
[ "$dict" = - ] || dict_arg=-dict=$dict
echo "fuzzing $name for ${seconds}s on $(ls "$work/corpus" | wc -l) seeds"

# The seeds are run first, so a regression in a known input fails at once.
# shellcheck disable=SC2086  # $dict_arg is empty or one word
if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
   UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
   "$work/fuzzer" "$work/corpus" \
     -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
     $dict_arg -artifact_prefix="$work/" -print_final_stats=1 >"$work/fuzz.log" 2>&1; then
  tail -n 20 "$work/fuzz.log"
  echo "PASS: no crash in ${seconds}s"
  exit 0
fi

keep=1
tail -n 60 "$work/fuzz.log"
echo "FAIL: the fuzzer found a problem; log and crash input kept in $work:"
ls -l "$work" | grep -E 'crash-|leak-|timeout-|oom-' || true
exit 1
