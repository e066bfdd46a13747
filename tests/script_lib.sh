# How a test script reports, shared by the script libraries tests/preload/lib.sh (and so
# every script test that sources it) and tests/rdma/guest_lib.sh. Not sourced directly by a
# test: its library sets TEST_NAME when the test names itself.
#
# Exit codes follow meson: 0 pass, 77 skipped, anything else failed.

TEST_NAME=""

note() { printf '%s: %s\n' "$TEST_NAME" "$*"; }

skip() {
  printf '%s: SKIP: %s\n' "$TEST_NAME" "$*"
  exit 77
}

# fail MESSAGE: the test failed. A library that has more to show (a log) defines
# fail_details, which runs after the message.
fail() {
  printf '%s: FAIL: %s\n' "$TEST_NAME" "$*"
  if declare -F fail_details >/dev/null; then fail_details; fi
  exit 1
}

require_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip "'$c' is not installed"
  done
}
