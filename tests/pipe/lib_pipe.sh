# Shared setup for the fastsock-pipe script tests: the preload tests' helpers (lib.sh) plus
# the path of the fastsock-pipe binary (FASTSOCK_PIPE, set by tests/pipe/meson.build).
# shellcheck source=../preload/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../preload/lib.sh"

pipe_init() {  # pipe_init NAME
  init_test "$1"
  PIPE=${FASTSOCK_PIPE:?FASTSOCK_PIPE is not set (run through meson test)}
  [[ -x "$PIPE" ]] || fail "FASTSOCK_PIPE=$PIPE is not executable"
  require_cmd python3
}

# Short, bounded runs: the tests check behaviour, never timings.
QUICK=(--trials 2 --trial-time 0.005)
