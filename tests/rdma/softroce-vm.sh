#!/usr/bin/env bash
# softroce-vm.sh: runs a command inside a small throw-away VM that has a Soft-RoCE RDMA device
# (the kernel's rdma_rxe driver), so that libibverbs/librdmacm code runs for real on a
# machine without RDMA hardware.
#
#   tests/rdma/softroce-vm.sh [--timeout SECONDS] [--mem MB] [--workdir DIR] [--env NAME]...
#                             -- COMMAND [ARGS...]
#
# How it works (docs/rdma-tests.md says more):
#   - QEMU boots the host's own Debian kernel (/boot/vmlinuz-*) with a tiny initramfs that
#     this script builds once and caches: busybox, the handful of modules the guest needs
#     (virtio, 9p, overlay, veth, rdma_rxe, ib_uverbs, rdma_ucm) and an /init.
#   - /init mounts the host's root filesystem read-only over 9p, puts a tmpfs overlay on top
#     (the guest may write anywhere; nothing reaches the host) and chroots into it, so every
#     program and library of the host, and the build tree, are there at their usual paths.
#     /tmp and /dev/shm are fresh tmpfs.
#   - DIR (--workdir, default: the current directory) is mounted read-write at its own path:
#     the only place where the guest can leave files for the host.
#   - In the guest: veth0 with 10.77.0.1/24 and the RDMA device rxe0 on it. COMMAND runs in
#     the current directory with SOFTROCE_ADDR=10.77.0.1 and SOFTROCE_DEV=rxe0 exported.
#     Every RDMA endpoint must use SOFTROCE_ADDR: rxe cannot resolve routes on the loopback
#     device (rdma_resolve_route fails with "No such device" on 127.0.0.1).
#
# Environment passed into the guest: PATH, LANG, LC_*, TZ, FASTSOCK_*, SOFTROCE_*, PROGS_DIR,
# ASAN_OPTIONS, UBSAN_OPTIONS, MESON_TEST_ITERATION, and each NAME given with --env. HOME and
# TMPDIR are /tmp in the guest. The guest's PATH starts with the system's directories (/usr/bin
# before the host's own entries): a shim such as pyenv's python3 runs a shell script and a few
# programs per call, which costs seconds under emulation (6 s per python3 start, against
# 0.07 s for /usr/bin/python3).
#
# Exit status: COMMAND's own; 124 when it did not finish within --timeout seconds (default
# 600; COMMAND is stopped a little earlier inside the guest so that its output is kept);
# 125 when the VM could not start (the reason is printed).
#
# Settings from the environment:
#   SOFTROCE_CACHE  where the initramfs is cached (default: $XDG_CACHE_HOME/fastsock, else
#                   ~/.cache/fastsock)
#   SOFTROCE_KVM=1  use KVM when /dev/kvm is usable (default: software emulation, TCG, which
#                   works everywhere; a boot takes about 6 s)
#   SOFTROCE_KEEP=1 keep the run directory (DIR/.softroce-run.*: console log, guest script)
#   SOFTROCE_BOOT_TIMEOUT
#                   seconds the guest may take to boot and set up rxe0 before the command
#                   starts (default 90); a boot that takes longer is stopped and done once
#                   more, with the kernel's messages shown; 125 if that one stalls too
#
# Needs (Debian 12): qemu-system-x86 linux-image-amd64 busybox-static cpio kmod rdma-core
# iproute2 (scripts/deps.sh installs them). Performance in the VM is that of software
# emulation: use it for correctness, and for ratios between runs in the same VM only.
set -euo pipefail

prog=softroce-vm
cannot_start() {
  printf '%s: cannot start the VM: %s\n' "$prog" "$*" >&2
  exit 125
}

timeout_s=600
mem=2048
# The directory shared read-write with the guest at its own path: the project (run_in_vm.sh
# sets it to the source root, which holds the build tree) or else the current directory. It
# must be shared explicitly: a checkout under /tmp would be hidden by the guest's tmpfs /tmp.
workdir=${SOFTROCE_WORKDIR:-$PWD}
extra_env=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    --mem) mem=${2:?--mem needs a value}; shift 2 ;;
    --workdir) workdir=${2:?--workdir needs a value}; shift 2 ;;
    --env) extra_env+=("${2:?--env needs a name}"); shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) cannot_start "unknown option '$1' (see --help)" ;;
  esac
done
[[ $# -gt 0 ]] || cannot_start "no command given (see --help)"
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -ge 20 ]] || cannot_start "--timeout must be at least 20 seconds"
workdir=$(cd "$workdir" && pwd -P) || cannot_start "no directory $workdir"

# ---- what the host must have -------------------------------------------------------------
pkgs="qemu-system-x86 linux-image-amd64 busybox-static cpio kmod rdma-core iproute2"
for b in qemu-system-x86_64 busybox cpio modprobe gzip timeout; do
  command -v "$b" >/dev/null 2>&1 || cannot_start "'$b' is not installed (apt-get install $pkgs)"
done
# The newest kernel in /boot that has its modules, among them rdma_rxe.
kver=""
for k in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|^/boot/vmlinuz-||' | sort -rV); do
  if [[ -r /boot/vmlinuz-$k ]] && modprobe -S "$k" -n rdma_rxe 2>/dev/null; then
    kver=$k
    break
  fi
done
[[ -n $kver ]] ||
  cannot_start "no readable kernel image in /boot with the rdma_rxe module (apt-get install linux-image-amd64)"

# ---- the initramfs, built once per kernel and version of this script ----------------------
cache=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/fastsock}
mkdir -p "$cache" || cannot_start "cannot create the cache directory $cache"
initrd="$cache/softroce-initrd-$kver-$(sha256sum "$0" | cut -c1-12).gz"
stage=""
run=""
cleanup() {
  [[ -z $stage ]] || rm -rf "$stage"
  [[ -z $run || -n ${SOFTROCE_KEEP:-} ]] || rm -rf "$run"
}
trap cleanup EXIT

if [[ ! -s $initrd ]]; then
  stage=$(mktemp -d) || cannot_start "cannot create a temporary directory"
  mkdir -p "$stage"/{bin,proc,sys,dev,host,newroot,upper,mods}
  cp "$(command -v busybox)" "$stage/bin/busybox"
  for a in sh mount insmod mkdir sed ln poweroff chroot; do ln -s busybox "$stage/bin/$a"; done
  # Modules with their dependencies, in load order (modprobe --show-depends lists them so).
  # crc32_generic is no symbol dependency of rdma_rxe, which asks the crypto API for "crc32"
  # at run time: without it `rdma link add` fails with "No such file or directory".
  # tcp_diag: the kernel loads it on demand through /sbin/modprobe, which the guest's own
  # root (this initramfs) lacks; without it sock_diag finds no TCP socket (the library
  # looks up listening sockets with it: docs/verbs.md, fork).
  n=0
  for m in virtio_pci 9p 9pnet_virtio overlay veth crc32_generic rdma_rxe rdma_ucm ib_uverbs tcp_diag; do
    modprobe -S "$kver" --show-depends "$m" >>"$stage/deps" ||
      cannot_start "kernel $kver has no module $m"
  done
  awk '$1 == "insmod" && !seen[$2]++ { print $2 }' "$stage/deps" >"$stage/modlist"
  while read -r f; do
    n=$((n + 1))
    out=$(printf '%s/mods/%02d.ko' "$stage" "$n")
    case $f in
      *.xz) xz -dc "$f" >"$out" ;;
      *.zst) zstd -qdc "$f" >"$out" ;;
      *) cp "$f" "$out" ;;
    esac || cannot_start "cannot unpack module $f"
  done <"$stage/modlist"
  rm "$stage/deps" "$stage/modlist"
  # /init: mount the host's root read-only with a tmpfs overlay, the work directory
  # read-write, and run the guest script (softroce_guest= on the kernel command line).
  cat >"$stage/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in /mods/*.ko; do insmod "$m" 2>/dev/null; done
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
o=trans=virtio,version=9p2000.L,msize=262144
if ! mount -t 9p -o "$o,ro" hostroot /host; then echo "softroce-vm: guest: cannot mount the host root"; poweroff -f; fi
mount -t tmpfs tmpfs /upper; mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/host,upperdir=/upper/u,workdir=/upper/w /newroot
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
# What udev would add to /dev: bash's process substitution needs /dev/fd.
ln -s /proc/self/fd /newroot/dev/fd; ln -s /proc/self/fd/0 /newroot/dev/stdin
ln -s /proc/self/fd/1 /newroot/dev/stdout; ln -s /proc/self/fd/2 /newroot/dev/stderr
mkdir -p /newroot/dev/pts; mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmp /newroot/tmp; mkdir -p /newroot/dev/shm; mount -t tmpfs shm /newroot/dev/shm
mount -t tmpfs run /newroot/run
W=$(arg softroce_work); mkdir -p "/newroot$W"
if ! mount -t 9p -o "$o" work "/newroot$W"; then echo "softroce-vm: guest: cannot mount $W"; poweroff -f; fi
chroot /newroot /bin/bash "$(arg softroce_guest)"
poweroff -f
INIT
  chmod +x "$stage/init"
  (cd "$stage" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$initrd.$$" &&
    mv "$initrd.$$" "$initrd" || { rm -f "$initrd.$$"; cannot_start "cannot write $initrd"; }
  rm -rf "$stage"
  stage=""
  # Initramfs files of earlier versions of this script are of no further use.
  find "$cache" -maxdepth 1 -name 'softroce-initrd-*.gz' ! -name "${initrd##*/}" -delete 2>/dev/null || true
fi

# ---- the run directory: guest script, command, environment, exit status -----------------
run=$(mktemp -d "$workdir/.softroce-run.XXXXXX") || cannot_start "cannot write to $workdir"
{
  for v in $(compgen -e); do
    case $v in
      PATH | LANG | LC_* | TZ | FASTSOCK_* | SOFTROCE_* | PROGS_DIR | ASAN_OPTIONS | UBSAN_OPTIONS | MESON_TEST_ITERATION) ;;
      *) continue ;;
    esac
    printf 'export %s=%q\n' "$v" "${!v}"
  done
  for v in "${extra_env[@]}"; do
    [[ -v $v ]] && printf 'export %s=%q\n' "$v" "${!v}"
  done
} >"$run/env"
printf '%q ' "$@" >"$run/cmd"
# The command is stopped inside the guest 15 s before the host gives up on the VM, so that a
# hung command still leaves its output and a clean exit status (124) behind (boot_vm writes
# the bound for each boot to guest_timeout).
sys_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cat >"$run/guest.sh" <<GUEST
# Runs in the guest (bash, chrooted into the overlay of the host's root).
export PATH=$sys_path
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add 10.77.0.1/24 dev veth0
ip link set veth0 up; ip link set veth1 up
if ! rdma link add rxe0 type rxe netdev veth0; then
  echo "softroce-vm: guest: cannot create rxe0 on veth0"
  echo 125 >$(printf %q "$run/rc"); exit
fi
source $(printf %q "$run/env")
export PATH=$sys_path\${PATH:+:\$PATH}
export SOFTROCE_ADDR=10.77.0.1 SOFTROCE_DEV=rxe0 HOME=/tmp TMPDIR=/tmp
cd $(printf %q "$PWD")
# Tells the host that the boot and the RDMA set-up are done (its boot watchdog).
echo \$(cut -d' ' -f1 /proc/uptime) >$(printf %q "$run/started")
timeout -k 5 \$(<$(printf %q "$run/guest_timeout")) bash $(printf %q "$run/cmd") </dev/null
echo \$? >$(printf %q "$run/rc")
GUEST

accel=tcg
cpu=max
if [[ ${SOFTROCE_KVM:-0} == 1 && -w /dev/kvm ]]; then
  accel=kvm
  cpu=host
fi
# passthrough keeps owners and modes as they are on the host, which needs root there.
secmodel=passthrough
[[ $(id -u) -eq 0 ]] || secmodel=none

# boot_vm SECONDS KERNEL_VERBOSITY: boots the VM, which runs the command, for at most SECONDS;
# returns QEMU's exit status (124: stopped by the timeout, or by the boot watchdog). The
# console shows the guest's output (the command's stdout and stderr); the firmware's banner
# and escape sequences are removed from what is shown, the raw log stays in the run
# directory. The first boot keeps the kernel quiet (loglevel=1): with error messages on the
# emulated serial console (loglevel=4), rdma_claim ran out of time in 3 runs of 3 (which
# messages slowed it was not looked into).
boot_vm() {
  local budget=$1 verbosity=$2 vm
  rm -f "$run/started" "$run/qemu.pid"
  guest_timeout=$((budget - 15))
  echo "$guest_timeout" >"$run/guest_timeout"
  (
    timeout -k 5 "$budget" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -m "$mem" -smp 2 \
      -kernel "/boot/vmlinuz-$kver" -initrd "$initrd" -pidfile "$run/qemu.pid" \
      -append "console=ttyS0 $verbosity panic=-1 softroce_work=$workdir softroce_guest=$run/guest.sh" \
      -nographic -no-reboot -nic none -monitor none -serial stdio \
      -virtfs "local,path=/,mount_tag=hostroot,security_model=$secmodel,readonly=on,multidevs=remap" \
      -virtfs "local,path=$workdir,mount_tag=work,security_model=$secmodel,multidevs=remap" \
      </dev/null 2>&1 | tr -d '\r' | tee -a "$run/console.log" |
      sed -u -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' -e 's/SeaBIOS ([^)]*)//' \
        -e 's/Booting from ROM\.*//' -e '/reboot: Power down/d' -e '/^$/d'
    exit "${PIPESTATUS[0]}"
  ) &
  vm=$!
  # The boot watchdog: a guest that has not started the command within boot_limit seconds
  # is stuck in its boot or its RDMA set-up (seen once in CI: nothing at all printed in
  # 400 s); it is stopped, so that the caller can boot again.
  local waited=0
  while [[ ! -e $run/started ]] && kill -0 "$vm" 2>/dev/null; do
    if ((waited >= boot_limit)); then
      stalled=1
      [[ -s $run/qemu.pid ]] && kill "$(<"$run/qemu.pid")" 2>/dev/null
      break
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$vm"
}

# A boot normally takes under 10 s (TCG); a busy CI machine may take a few times that.
boot_limit=${SOFTROCE_BOOT_TIMEOUT:-90}
((boot_limit < timeout_s)) || boot_limit=$timeout_s
start=$SECONDS
stalled=0
set +e
boot_vm "$timeout_s" "quiet loglevel=1"
qrc=$?
if ((stalled)); then
  echo "$prog: the guest did not start the command within ${boot_limit}s (a stalled boot or" \
    "RDMA set-up); booting once more, with the kernel's messages shown" >&2
  budget=$((timeout_s - (SECONDS - start)))
  if ((budget >= 20)); then
    stalled=0
    boot_vm "$budget" "loglevel=7"
    qrc=$?
  fi
  ((stalled)) && cannot_start "the guest did not start the command within ${boot_limit}s" \
    "$([[ $budget -ge 20 ]] && echo twice || echo "and no time was left to boot again")" \
    "(the console output is above)"
fi
set -e

if [[ -s $run/rc ]]; then
  rc=$(<"$run/rc")
  [[ $rc == 124 ]] && echo "$prog: the command did not finish within ${guest_timeout}s" >&2
  [[ $rc == 125 ]] && cannot_start "the guest could not set up the RDMA device"
  exit "$rc"
fi
if [[ $qrc == 124 ]]; then
  echo "$prog: the VM did not finish within ${timeout_s}s$([[ -s $run/started ]] &&
    echo " (the command started $(<"$run/started") s after the boot)")" >&2
  exit 124
fi
[[ $qrc == 0 ]] || cannot_start "qemu-system-x86_64 exited with status $qrc (its output is above)"
cannot_start "the guest did not run the command (the console output is above)"
