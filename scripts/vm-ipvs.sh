#!/usr/bin/env bash
# Runs one command as root inside a throw-away QEMU VM that boots Debian's stock kernel, so the
# IPVS proxier can be tested on a kernel that has IPVS (this machine's kernel has no ip_vs).
#
#   scripts/vm-ipvs.sh setup          # once per machine (root): apt packages, kernel, initramfs
#   scripts/vm-ipvs.sh run CMD...     # boot, run CMD in $PWD with the host's environment, power off
#
#   e.g.  VM_RW=$PWD scripts/vm-ipvs.sh run /root/.pyenv/versions/3.11.7/bin/python3 -m pytest -q tests/proxy/ipvs
#
# The guest's root is the host's "/" shared read-only over 9p with a tmpfs overlay on top, so the
# host's Python, venvs, tools (ip, iptables, ipset, nft, ...) and the project appear at the same
# paths, and everything the guest writes is thrown away at power-off except in the shared
# read-write directories ($VM_OUT, VM_RW, VM_OUT_DIR). The VM has no network card (-nic none)
# unless VM_TAP names a tap device: every address and namespace a test creates exists only
# inside it. /tmp, /run and /dev/shm are fresh tmpfs in the guest, so host paths under /tmp are
# visible only when shared (VM_RO, VM_RW, VM_OUT_DIR). Kernel modules load as on a normal host
# (modprobe, or autoloading).
#
# `run` exits with the guest command's exit code, 124 when VM_TIMEOUT runs out, and 255 when the
# guest never reported one (boot failure or kernel panic; the console's tail is then printed).
#
# Environment of `run`:
#   VM_TIMEOUT=600   seconds before the VM is killed (exit 124)
#   VM_MEM=2048      guest memory in MiB (several Python processes fit in the default)
#   VM_SMP=1         guest CPUs; 1 is faster than 2 under software emulation on a 2-core machine
#   VM_ACCEL=auto    tcg | kvm; auto picks kvm only where /dev/kvm is real VT-x/AMD-V (not PVM)
#   VM_RW="d1 d2"    host directories shared read-write at the same path (e.g. VM_RW=$PWD to keep
#                    junit.xml); VM_RO="..." the same read-only (useful for paths under /tmp)
#   VM_OUT_DIR=dir   use this host directory as the guest's $VM_OUT (kept); otherwise $VM_OUT is a
#                    fresh directory deleted after the run unless VM_KEEP=1
#   VM_MODULES="..." kernel modules modprobed by the guest's init before CMD (default: none; every
#                    module the tests need autoloads, and tests may want to see an unloaded ip_vs)
#   VM_KEEP=1        keep the run's directory (run.sh, log, console.log, qemu.err) for debugging
#   VM_TAP=ifname    give the guest an eth0 (virtio-net) on this existing tap device of qemu's
#                    network namespace, with address VM_GUEST_IP (a CIDR; set before CMD runs).
#                    The caller owns that link: tests/support/ipvs_vm.py makes it in a namespace
#                    of its own that holds nothing else, so the guest reaches only that namespace
# Environment of `setup`:
#   KUBESVC_VM_CACHE=/var/cache/kubesvc-vm   the cache (outside the repository; shared by `run`)
#   KUBESVC_VM_KERNEL_PKG=name|auto          kernel package; default the pin below, `auto` resolves
#                                            linux-image-amd64 now
#
# Choices measured on this machine kind (2 cores, nested PVM): /dev/kvm here cannot run a stock
# kernel (qemu aborts, or the guest dies on an emulation failure), so the VM runs under TCG
# software emulation; it boots the uncompressed vmlinux through its PVH note because the kernel's
# own xz decompressor is slow under TCG; -M pc (microvm hangs with this kernel); -smp 1 (faster
# than 2 on 2 cores); no pyenv shims in the guest (each costs ~10 s under TCG). A trivial run
# takes about 3 s; Python starts and imports 15-25 times slower than natively.
set -euo pipefail

CACHE="${KUBESVC_VM_CACHE:-/var/cache/kubesvc-vm}"
# Pinned for reproducibility: what `apt-cache depends linux-image-amd64` gave on Debian 12 when this
# was written. When Debian drops it from the archive, setup falls back to resolving
# linux-image-amd64 (with a warning); KUBESVC_VM_KERNEL_PKG=auto asks for that resolution outright.
KERNEL_PKG_PINNED=linux-image-6.1.0-56-amd64
KERNEL_META=linux-image-amd64
# Bump when what setup builds changes, so that `setup` rebuilds a cache made by an older script.
CACHE_LAYOUT=2

# Kernel modules kept from the ~400 MB tree (paths under lib/modules/$KVER): all of networking
# (ip_vs*, ip_set*, netfilter, nf_tables, xt_* with xt_ipvs, nf_conntrack, nf_nat, bridge, 9pnet),
# the libraries and crypto they need, 9p/overlay/netfs/fscache for the root filesystem, virtio
# for the 9p transport, and the virtual network devices tests create (dummy, veth, vxlan, ...).
KEEP_MODULE_DIRS=(kernel/net kernel/lib kernel/crypto kernel/arch/x86/crypto kernel/fs/9p
  kernel/fs/overlayfs kernel/fs/netfs kernel/fs/fscache kernel/drivers/virtio
  kernel/drivers/net/vxlan kernel/drivers/net/ipvlan kernel/drivers/net/wireguard)
# Modules that must be in the kept subset with their module dependencies (checked by setup, so
# a module trimmed away fails setup rather than a test inside the VM).
REQUIRED_MODULES=(ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh ip_vs_mh xt_ipvs nf_conntrack nf_nat
  nf_tables nft_compat nft_chain_nat xt_conntrack xt_MASQUERADE xt_mark xt_comment xt_set
  xt_addrtype xt_statistic xt_physdev ip_set ip_set_hash_ipport ip_set_hash_ipportip
  ip_set_hash_ipportnet ip_set_hash_net ip_set_bitmap_port iptable_nat iptable_filter
  dummy veth bridge br_netfilter 9p 9pnet_virtio overlay virtio_pci)
# Loaded by the initramfs (with their dependencies) to reach the 9p root.
BOOT_MODULES=(virtio_pci 9pnet_virtio 9p overlay)

die() { echo "vm-ipvs: $*" >&2; exit 2; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (qemu's 9p export of / and apt need it)"; }

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

# ---------------------------------------------------------------------------------------- setup

setup_packages() {
  local need=()
  command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
  # The initramfs needs the static busybox (the dynamic one from `busybox` would lack its libc).
  [ "$(dpkg-query -W -f='${db:Status-Status}' busybox-static 2>/dev/null)" = installed ] || need+=(busybox-static)
  # depmod at setup; modprobe in the guest is the host's /sbin/modprobe, seen through the 9p root.
  command -v depmod >/dev/null 2>&1 && command -v modprobe >/dev/null 2>&1 || need+=(kmod)
  command -v cpio >/dev/null 2>&1 || need+=(cpio)
  if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

resolve_kernel_pkg() {
  apt-cache depends "$KERNEL_META" 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ {print $2; exit}'
}

# Downloads the kernel .deb into the current directory; prints the package name used.
download_kernel() {
  local want=$1 pkg updated=0
  while :; do
    if [ "$want" = auto ]; then pkg=$(resolve_kernel_pkg); else pkg=$want; fi
    if [ -n "$pkg" ] && apt-get download -qq "$pkg" >/dev/null 2>&1; then
      echo "$pkg"; return 0
    fi
    # Stale or missing package lists: refresh once, then retry.
    if [ $updated = 0 ]; then
      apt-get update -qq >&2; updated=1; continue
    fi
    if [ "$want" != auto ]; then
      echo "vm-ipvs: warning: kernel package $want is not in the archive any more; using what $KERNEL_META depends on" >&2
      want=auto; continue
    fi
    die "cannot download the kernel package (${pkg:-$KERNEL_META unresolved})"
  done
}

# Cuts the uncompressed ELF vmlinux out of the bzImage (its payload is an xz stream) and keeps it
# only if it carries the PVH entry note qemu needs to boot an ELF kernel directly. Under TCG the
# kernel's own xz decompressor is slow: a run that loads ip_vs took 3.3 s with vmlinux, 6.5 s
# with vmlinuz.
extract_vmlinux() {
  local py=/usr/bin/python3
  [ -x "$py" ] || py=python3
  "$py" - "$1" "$2" <<'EOF'
import lzma, os, struct, sys
src, dst = sys.argv[1:3]
data = open(src, "rb").read()
pm = ((data[0x1f1] or 4) + 1) * 512                      # start of the protected-mode code
off, length = struct.unpack_from("<II", data, 0x248)     # payload_offset, payload_length
payload = data[pm + off:pm + off + length]
if not payload.startswith(b"\xfd7zXZ\x00"):
    raise SystemExit("bzImage payload is not xz")
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
if elf[:5] != b"\x7fELF\x02":
    raise SystemExit("payload is not a 64-bit ELF")
phoff, = struct.unpack_from("<Q", elf, 0x20)
phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
pvh = False
for i in range(phnum):
    p_type, _, p_offset = struct.unpack_from("<IIQ", elf, phoff + i * phentsize)
    p_filesz, = struct.unpack_from("<Q", elf, phoff + i * phentsize + 0x20)
    if p_type != 4:                                      # PT_NOTE
        continue
    pos, end = p_offset, p_offset + p_filesz
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
        name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
        pvh |= name == b"Xen" and ntype == 18            # XEN_ELFNOTE_PHYS32_ENTRY
        pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
if not pvh:
    raise SystemExit("vmlinux has no PVH entry note")
with open(dst + ".tmp", "wb") as f:
    f.write(elf)
os.rename(dst + ".tmp", dst)
EOF
}

# The guest's PID 1. It stays in the initramfs (its root is what the kernel's usermode helper
# uses, see modprobe-chroot) and runs the command with chroot into the overlay root.
write_init() {
  cat >"$1" <<'EOF'
#!/bin/sh
# kubesvc vm-ipvs guest init (busybox). Reads /ctl/vm.conf, written by `vm-ipvs.sh run`.
export PATH=/bin:/sbin
# Without /ctl/rc the host reports 255 and prints the console's tail, where this message lands.
fail() { echo "vm-init: $*" >/dev/console; sync; poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod "/mods/$m" || fail "insmod $m"; done
P9=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $P9 ctl /ctl || fail "cannot mount the run directory"
. /ctl/vm.conf
# Root: the host's / read-only (cache=loose: nothing on it changes during a run) under a tmpfs.
mount -t 9p -o $P9,ro,cache=loose hostroot /lower || fail "cannot mount the host root"
mount -t tmpfs -o mode=755 upper /rw && mkdir /rw/upper /rw/work
N=/newroot
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay $N || fail "overlay"
mount -t proc proc $N/proc
mount -t sysfs sys $N/sys
mount -t devtmpfs dev $N/dev
mkdir -p $N/dev/pts $N/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $N/dev/pts
mount -t tmpfs -o mode=1777 shm $N/dev/shm
ln -sf /proc/self/fd $N/dev/fd; ln -sf fd/0 $N/dev/stdin; ln -sf fd/1 $N/dev/stdout; ln -sf fd/2 $N/dev/stderr
# A fresh /run (ip netns keeps its mounts in /run/netns) and /tmp, as on a freshly booted host.
mount -t tmpfs -o mode=755 run $N/run
mount -t tmpfs -o mode=1777 tmp $N/tmp
# The kept module subset, where modprobe looks for it.
mkdir -p $N/lib/modules/$KVER && mount -o bind $N$MODDIR $N/lib/modules/$KVER || fail "modules"
# The run directory and the shared directories, parents first (the list is sorted on the host).
while read -r path src opts; do
  [ -n "$path" ] || continue
  mkdir -p "$N$path"
  if [ "$src" = /ctl ]; then mount -o bind /ctl "$N$path"
  else mount -t 9p -o $P9,$opts "$src" "$N$path"; fi || fail "cannot mount $path"
done </ctl/shares
# Module autoloading (ip link add ... type dummy, iptables, ipset, nft) runs /proc/sys/kernel/modprobe
# in PID 1's root, the initramfs: point it at a wrapper that runs the host's modprobe in the new root.
echo /sbin/modprobe-chroot >/proc/sys/kernel/modprobe
for m in $MODULES; do chroot $N /sbin/modprobe "$m" || fail "modprobe $m"; done
hostname kubesvc-vm
ip link set lo up
chroot $N /usr/bin/env -i /bin/bash --noprofile --norc "$CTL/run.sh" </dev/null >/ctl/log 2>&1
echo $? >/ctl/rc
sync
poweroff -f
EOF
  chmod 755 "$1"
}

setup() {
  need_root
  setup_packages
  local want="${KUBESVC_VM_KERNEL_PKG:-$KERNEL_PKG_PINNED}"
  local stamp="layout=$CACHE_LAYOUT want=$want"
  # Fast path: the stamp is written last, so its presence means the whole cache was built.
  if [ -f "$CACHE/complete" ] && [ "$(head -n 1 "$CACHE/complete")" = "$stamp" ]; then
    return 0
  fi
  local t0=$SECONDS
  mkdir -p "$CACHE"
  rm -f "$CACHE/complete"
  # Build in a staging directory inside the cache, then move into place; an interrupted setup
  # leaves no stamp and is redone from scratch next time (its staging directory goes then).
  rm -rf "$CACHE"/.setup.* 2>/dev/null || true
  STAGE=$(mktemp -d "$CACHE/.setup.XXXXXX")
  local stage=$STAGE
  trap 'rm -rf "$STAGE"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # apt-get download drops privileges to _apt, which must be able to write here.
  chmod 755 "$stage"; chown _apt "$stage" 2>/dev/null || true

  echo "vm-ipvs: downloading the kernel package" >&2
  local pkg deb
  pkg=$(cd "$stage" && download_kernel "$want")
  deb=$(ls "$stage"/*.deb)
  dpkg-deb -x "$deb" "$stage/x"
  rm -f "$deb"
  local moddir= kver d
  for d in "$stage"/x/lib/modules/* "$stage"/x/usr/lib/modules/*; do
    [ -d "$d" ] && moddir=$d && break
  done
  [ -n "$moddir" ] || die "no modules in $pkg"
  kver=$(basename "$moddir")

  echo "vm-ipvs: kernel $kver: keeping the module subset, extracting vmlinux" >&2
  local modroot="$stage/modroot/lib/modules/$kver"
  mkdir -p "$modroot"
  local keep=()
  for d in "${KEEP_MODULE_DIRS[@]}"; do [ ! -d "$moddir/$d" ] || keep+=("$d"); done
  (cd "$moddir" && cp -a --parents modules.order modules.builtin modules.builtin.modinfo \
      "${keep[@]}" kernel/drivers/net/*.ko "$modroot/")
  depmod -b "$stage/modroot" "$kver"
  modprobe -d "$stage/modroot" -S "$kver" -a --show-depends "${REQUIRED_MODULES[@]}" >/dev/null \
    || die "a required module is missing from the kept subset"

  mkdir -p "$stage/kernel"
  cp "$stage/x/boot/vmlinuz-$kver" "$stage/kernel/vmlinuz"
  cp "$stage/x/boot/config-$kver" "$stage/kernel/config"
  extract_vmlinux "$stage/kernel/vmlinuz" "$stage/kernel/vmlinux" \
    || echo "vm-ipvs: warning: no vmlinux; runs will boot the (slower) compressed vmlinuz" >&2
  rm -rf "$stage/x"

  echo "vm-ipvs: building the initramfs" >&2
  local ir="$stage/initramfs"
  mkdir -p "$ir"/{bin,sbin,dev,proc,sys,ctl,lower,rw,newroot,mods}
  cp /bin/busybox "$ir/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$ir/bin/$applet"
  done
  mknod -m 600 "$ir/dev/console" c 5 1
  # The boot modules in dependency order, for busybox insmod.
  modprobe -d "$stage/modroot" -S "$kver" -a --show-depends "${BOOT_MODULES[@]}" \
    | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
      cp "$ko" "$ir/mods/"; basename "$ko"
    done >"$ir/mods/order"
  write_init "$ir/init"
  printf '#!/bin/sh\nexec /bin/chroot /newroot /sbin/modprobe "$@"\n' >"$ir/sbin/modprobe-chroot"
  chmod 755 "$ir/sbin/modprobe-chroot"
  # Uncompressed: decompressing in the guest would cost more under TCG than reading 3 MB.
  (cd "$ir" && find . | cpio -o -H newc -R 0:0 --quiet) >"$stage/initramfs.cpio"
  rm -rf "$ir"

  rm -rf "$CACHE/kernel" "$CACHE/modroot" "$CACHE/initramfs.cpio" "$CACHE/KVER"
  mv "$stage/kernel" "$stage/modroot" "$stage/initramfs.cpio" "$CACHE/"
  echo "$kver" >"$CACHE/KVER"
  mkdir -p "$CACHE/runs"
  rm -rf "$stage"
  trap - EXIT INT TERM
  printf '%s\npkg=%s\nkver=%s\n' "$stamp" "$pkg" "$kver" >"$CACHE/complete.tmp"
  mv "$CACHE/complete.tmp" "$CACHE/complete"
  echo "vm-ipvs: setup done in $((SECONDS - t0)) s: $pkg ($kver) in $CACHE ($(du -sh "$CACHE" | cut -f1))" >&2
}

# ------------------------------------------------------------------------------------------ run

# A shared directory's path is used verbatim in qemu options and in the guest's shares list.
check_path() {
  [ -d "$1" ] || die "not a directory: $1"
  case $1 in *[[:space:],]*) die "shared paths cannot contain spaces or commas: $1" ;; esac
}

# The host's PATH for the guest, with pyenv's shims replaced by the bin directories of the
# versions pyenv selects here: a shim costs ~10 s per call under TCG, the interpreter is the same.
guest_path() {
  local root prefixes entry p out=() swapped=0
  root=$(pyenv root 2>/dev/null) && prefixes=$(pyenv prefix 2>/dev/null) || { echo "$PATH"; return; }
  local IFS=:
  for entry in $PATH; do
    case $entry in
      "$root"/shims | "$root"/plugins/*/shims)
        if [ $swapped = 0 ]; then
          for p in $prefixes; do out+=("$p/bin"); done
          swapped=1
        fi ;;
      *) out+=("$entry") ;;
    esac
  done
  echo "${out[*]}"
}

run() {
  need_root
  [ $# -gt 0 ] || die "usage: $0 run CMD [ARG...]"
  [ -f "$CACHE/complete" ] || die "no VM cache in $CACHE: run '$0 setup' first"
  local kver kernel
  kver=$(cat "$CACHE/KVER")
  kernel="$CACHE/kernel/vmlinux"
  [ -f "$kernel" ] || kernel="$CACHE/kernel/vmlinuz"

  local accel="${VM_ACCEL:-auto}" cpu
  if [ "$accel" = auto ]; then
    # /dev/kvm backed by kvm_pvm (nested PVM) cannot run a stock kernel; only real VT-x/AMD-V can.
    # (The kvm path follows the reference notes but was not tested on this machine kind.)
    accel=tcg
    if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
      accel=kvm
    fi
  fi
  case $accel in tcg) cpu=max ;; kvm) cpu=host ;; *) die "VM_ACCEL must be tcg, kvm or auto" ;; esac

  mkdir -p "$CACHE/runs"
  RUN_DIR=$(mktemp -d "$CACHE/runs/XXXXXXXX")
  QEMU_PID= TAIL_PID=
  trap cleanup_run EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local ctl=$RUN_DIR out
  if [ -n "${VM_OUT_DIR:-}" ]; then
    mkdir -p "$VM_OUT_DIR"; out=$(readlink -f "$VM_OUT_DIR")
  else
    out="$ctl/out"; mkdir "$out"
  fi
  check_path "$ctl"; check_path "$out"

  # qemu's 9p exports: the host root (read-only), the run directory and the shared directories.
  # multidevs=remap keeps inode numbers unique across the host's mounts seen through one export.
  local fs=(-fsdev "local,id=hostroot,path=/,security_model=passthrough,readonly=on,multidevs=remap"
            -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
            -fsdev "local,id=ctl,path=$ctl,security_model=passthrough,multidevs=remap"
            -device virtio-9p-pci,fsdev=ctl,mount_tag=ctl)
  local shares=("$ctl /ctl -") n=0 dir dirs mode ro opts
  [ -z "${VM_OUT_DIR:-}" ] || VM_RW="${VM_RW:-} $out"
  for mode in rw ro; do
    # Read-write shares use 9p's default cache=none, so writes reach the host at once (and the
    # host's changes the guest); read-only ones are cached like the root.
    if [ $mode = rw ]; then dirs=${VM_RW:-}; ro=; opts=rw
    else dirs=${VM_RO:-}; ro=,readonly=on; opts=ro,cache=loose; fi
    for dir in $dirs; do
      dir=$(readlink -f "$dir"); check_path "$dir"
      fs+=(-fsdev "local,id=s$n,path=$dir,security_model=passthrough,multidevs=remap$ro"
           -device "virtio-9p-pci,fsdev=s$n,mount_tag=s$n")
      shares+=("$dir s$n $opts")
      n=$((n + 1))
    done
  done
  printf '%s\n' "${shares[@]}" | sort >"$ctl/shares"
  printf 'KVER=%q\nMODDIR=%q\nCTL=%q\nMODULES=%q\n' "$kver" "$CACHE/modroot/lib/modules/$kver" \
    "$ctl" "${VM_MODULES:-}" >"$ctl/vm.conf"

  # The guest command: the host's exported environment, the same cwd, the command as given.
  {
    echo "# written by vm-ipvs.sh run"
    local kv name
    while IFS= read -r -d '' kv; do
      name=${kv%%=*}
      [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
      case $name in _ | SHLVL | OLDPWD | PWD | PATH) continue ;; esac
      printf 'export %s=%q\n' "$name" "${kv#*=}"
    done < <(env -0)
    printf 'export PATH=%q\n' "$(guest_path)"
    printf 'export VM_OUT=%q\n' "$out"
    if [ -n "${VM_TAP:-}" ]; then
      printf 'modprobe virtio_net && ip link set eth0 up && ip addr add %q dev eth0 || { echo "vm-ipvs: no guest link" >&2; exit 125; }\n' "$VM_GUEST_IP"
    fi
    printf 'cd %q || { echo "vm-ipvs: %q is not visible in the guest (share it with VM_RO or VM_RW)" >&2; exit 125; }\n' "$PWD" "$PWD"
    printf 'exec'; printf ' %q' "$@"; printf '\n'
  } >"$ctl/run.sh"
  : >"$ctl/log"

  local nic=(-nic none)
  if [ -n "${VM_TAP:-}" ]; then
    [ -n "${VM_GUEST_IP:-}" ] || die "VM_TAP needs VM_GUEST_IP"
    nic=(-netdev "tap,id=n0,ifname=$VM_TAP,script=no,downscript=no" -device virtio-net-pci,netdev=n0)
  fi
  local cmdline="console=ttyS0 panic=-1 quiet"
  timeout "${VM_TIMEOUT:-600}" qemu-system-x86_64 -name kubesvc-vm -M pc -accel "$accel" -cpu "$cpu" \
    -smp "${VM_SMP:-1}" -m "${VM_MEM:-2048}" -nodefaults -no-user-config -display none \
    "${nic[@]}" -no-reboot -serial "file:$ctl/console.log" \
    -kernel "$kernel" -initrd "$CACHE/initramfs.cpio" -append "$cmdline" "${fs[@]}" \
    </dev/null >"$ctl/qemu.err" 2>&1 &
  QEMU_PID=$!
  # Stream the guest's output while it runs; tail does a last read after qemu is gone. Both run
  # in the background because bash runs a signal trap only once a foreground command ends, while
  # the `wait` builtin is interrupted by it: ^C or a TERM then stops the VM at once.
  tail -n +1 -s 0.2 -f --pid="$QEMU_PID" "$ctl/log" &
  TAIL_PID=$!
  local status=0
  wait "$QEMU_PID" || status=$?
  QEMU_PID=
  wait "$TAIL_PID" || true
  TAIL_PID=

  if [ -s "$ctl/rc" ]; then
    RUN_RC=$(cat "$ctl/rc")
  elif [ $status = 124 ]; then
    echo "vm-ipvs: timed out after ${VM_TIMEOUT:-600} s" >&2
    RUN_RC=124
  else
    echo "vm-ipvs: the guest reported no exit code (qemu exited with $status); console tail:" >&2
    tail -n 40 "$ctl/console.log" >&2 || true
    echo "vm-ipvs: qemu stderr:" >&2
    cat "$ctl/qemu.err" >&2 || true
    RUN_RC=255
  fi
  exit "$RUN_RC"
}

cleanup_run() {
  local rc=$?
  # On a signal: stop qemu (timeout passes the TERM on) and the output stream.
  local pid
  for pid in ${QEMU_PID:-} ${TAIL_PID:-}; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "${VM_KEEP:-0}" = 1 ]; then
    echo "vm-ipvs: kept $RUN_DIR" >&2
  else
    rm -rf "$RUN_DIR"
  fi
  exit "$rc"
}

case "${1:-}" in
  setup) shift; setup "$@" ;;
  run) shift; run "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
