#!/bin/sh
# Builds the libFuzzer target for the stats decoder of `fastsock stat` and runs a bounded
# campaign (the same approach as tests/fuzz/run_fuzz.sh for the configuration parser).
#
#   run_fuzz_stats.sh [SOURCE_ROOT [SECONDS]]   (SECONDS also from $FUZZ_SECONDS; default 10)
#
# Exit status: 0 clean, 1 crash / invariant failure / build error, 77 skipped (no clang++
# or no libFuzzer runtime; the reason is printed). On a failure the temporary directory
# (log and crash input) is kept and its path printed.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=${1:-$here/../..}
seconds=${2:-${FUZZ_SECONDS:-10}}
cxx=${CLANGXX:-clang++}

case $seconds in
  ''|*[!0-9]*) echo "run_fuzz_stats.sh: invalid time '$seconds' (expected whole seconds)" >&2; exit 1 ;;
esac

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "SKIP: $cxx not found (install clang and libclang-rt-14-dev to fuzz)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fastsock-fuzz-stats.XXXXXX")
keep=0
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; fi; }
trap cleanup EXIT
trap 'exit 1' INT TERM

# A missing fuzzer runtime is an environment limit, not a failure: probe it first.
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' \
  >"$work/probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$work/probe.cc" -o "$work/probe" \
    >"$work/probe.log" 2>&1; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing?):"
  sed 's/^/  /' "$work/probe.log" | head -5
  exit 77
fi

tool="$root/tools/fastsock"
flags="-std=c++20 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -Wall -Wextra"
# shellcheck disable=SC2086  # $flags is a word list on purpose
if ! "$cxx" $flags -I"$root/src" -I"$tool" "$here/fuzz_stats_reader.cc" \
    "$tool/stats_reader.cc" "$tool/text.cc" "$tool/proc_info.cc" "$tool/guarded_copy.cc" \
    -o "$work/fuzz_stats_reader"; then
  echo "FAIL: could not build the fuzzer with $cxx"
  exit 1
fi

# Inputs up to the header plus 64 slots: the decoder treats every slot alike.
mkdir "$work/corpus"
echo "fuzzing the stats decoder for ${seconds}s"
if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
   UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
   "$work/fuzz_stats_reader" "$work/corpus" \
     -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16833 \
     -artifact_prefix="$work/" -print_final_stats=1 >"$work/fuzz.log" 2>&1; then
  tail -n 12 "$work/fuzz.log"
  echo "PASS: no crash in ${seconds}s"
  exit 0
fi

keep=1
tail -n 60 "$work/fuzz.log"
echo "FAIL: the fuzzer found a problem; log and crash input kept in $work:"
ls -l "$work" | grep -E 'crash-|leak-|timeout-|oom-' || true
exit 1
