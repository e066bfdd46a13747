#!/usr/bin/env bash
# install.sh BUILD_DIR: `meson install` puts fastsock.h, fastsock.hpp (and the headers they
# include) and fastsock.pc where a separate project finds them: a C program built with
# `pkg-config --cflags --libs fastsock` (linked), and C and C++ programs built with only the
# cflags and FASTSOCK_DYNAMIC (not linked), all compile warning-free with -Werror and run.
# FASTSOCK_TEST_CFLAGS carries the sanitizer flags of a sanitizer build.
source "$(dirname "$0")/../preload/lib.sh"
init_test api_install
build=${1:?usage: install.sh BUILD_DIR}
require_cmd pkg-config
require_cmd cc
require_cmd c++

root="$WORK/root"
meson install -C "$build" --no-rebuild --destdir "$root" >"$WORK/install.out" 2>&1 ||
  { cat "$WORK/install.out"; fail "meson install failed"; }
pc=$(find "$root" -name fastsock.pc | head -1)
[[ -n $pc ]] || fail "no fastsock.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$root
for h in fastsock.h fastsock.hpp; do
  [[ -n $(find "$root" -path "*/include/fastsock/$h") ]] || fail "$h not installed"
done
cflags=$(pkg-config --cflags fastsock) || fail "pkg-config --cflags fastsock"
libs=$(pkg-config --libs fastsock) || fail "pkg-config --libs fastsock"
libdir=$(pkg-config --variable=libdir fastsock)
note "pkg-config: cflags '$cflags', libs '$libs'"

cat >"$WORK/use.c" <<'C'
#include <fastsock/fastsock.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {
  int sv[2];
  double out[4] = {1.5, -2, 3, 4}, in[4] = {0};
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  if (fastsock_send_array(sv[0], out, FASTSOCK_DOUBLE, 1, 3) != 0) return 2;
  if (fastsock_recv_array(sv[1], in, FASTSOCK_DOUBLE, 0, 3) != 0) return 3;
  if (memcmp(in, out + 1, 3 * sizeof(double)) != 0) return 4;
  printf("version %s\n", fastsock_version() ? fastsock_version() : "(absent)");
  return 0;
}
C
cp "$WORK/use.c" "$WORK/use.cc"
flags=(-Wall -Wextra -Werror -pedantic ${FASTSOCK_TEST_CFLAGS:-})
cc -std=c11 "${flags[@]}" $cflags "$WORK/use.c" -o "$WORK/linked" $libs ||
  fail "linked C build with pkg-config failed"
cc -std=c11 "${flags[@]}" -DFASTSOCK_DYNAMIC $cflags "$WORK/use.c" -o "$WORK/dynamic_c" ||
  fail "FASTSOCK_DYNAMIC C build failed"
c++ -std=c++20 "${flags[@]}" -DFASTSOCK_DYNAMIC $cflags -include fastsock/fastsock.hpp \
  "$WORK/use.cc" -o "$WORK/dynamic_cc" || fail "FASTSOCK_DYNAMIC C++ build (with fastsock.hpp) failed"

run_fg linked 20 env LD_LIBRARY_PATH="$libdir" "$WORK/linked"
grep -qx 'version [0-9.]*' "$WORK/linked.out" || fail "linked: $(cat "$WORK/linked.out")"
for p in dynamic_c dynamic_cc; do
  run_fg "$p" 20 without_fastsock "$WORK/$p"
  grep -qx 'version (absent)' "$WORK/$p.out" || fail "$p: $(cat "$WORK/$p.out")"
done
note "installed headers and fastsock.pc: linked C, and FASTSOCK_DYNAMIC C and C++ programs build with -Werror -pedantic and run"
note "PASS"
