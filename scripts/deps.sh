#!/usr/bin/env bash
# Installs what building and testing fastsock needs on Debian 12, with apt-get.
# Sourced by scripts/test.sh and scripts/main-job.sh; does nothing when all is present.
set -euo pipefail

FASTSOCK_PACKAGES=(
  # build
  g++ gcc meson ninja-build pkg-config binutils
  # fastsock-pipe: reads saved runs (compare) and writes JSON with nlohmann/json
  nlohmann-json3-dev
  # tests: Catch2 v2, libFuzzer (clang + its runtime), real programs run under the library
  catch2 clang libclang-rt-14-dev netpipe-tcp iperf3 socat curl python3 procps strace
  sockperf qperf redis-server redis-tools nginx wrk
  # gdb: an rdma test that stalls reports the programs' stacks (tests/rdma/guest_lib.sh)
  gdb
  # fastsock-pipe --plot (SVG and PNG graphs) and its test
  gnuplot-nox
  # optional transports, detected by meson (verbs)
  libibverbs-dev librdmacm-dev
  # the rdma suite (tests/rdma/softroce-vm.sh): the host's kernel booted under QEMU with the
  # Soft-RoCE driver (rdma_rxe), busybox and kmod for its initramfs, rdma-core/iproute2 to
  # create the device, the verbs and rdma_cm tools, and rsocket (librdmacm1, a dependency)
  # for the baseline test; perftest (ib_send_lat, ib_write_bw) for comparisons in bench/
  qemu-system-x86 linux-image-amd64 busybox-static cpio kmod rdma-core ibverbs-utils
  rdmacm-utils iproute2 perftest
)

fastsock_install_deps() {
  local missing=()
  for p in "${FASTSOCK_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# Configures (or reconfigures) a build directory and builds it.
#   fastsock_build DIR [meson options...]
fastsock_build() {
  local dir=$1
  shift
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
  ninja -C "$dir"
}
