#!/usr/bin/env bash
# tests/numa-vm/run.sh: run one command as root inside a QEMU guest whose kernel sees several
# sockets and NUMA nodes, so that placement code (thread pinning, mbind, first touch, hwloc)
# is tested for real on a machine that has a single NUMA node. `run.sh --help` for usage;
# README.md in this folder says why it works the way it does and what it costs.
#
# The guest runs the HOST's programs: its root file system is the host's / exported read-only
# over virtio-9p with a tmpfs overlay on top, and --dir is shared read-write at the same
# absolute path. So a test binary in a build tree runs in the guest unchanged.
#
# Pieces, in the order main() uses them:
#   setup    host packages (apt-get, only if missing), Debian's kernel (apt-get download,
#            unpacked into the cache, never installed), a busybox initramfs (cached)
#   job      a per-run control directory shared with the guest: the command as a bash
#            script, the command's output (streamed by tail -f) and its exit code
#   machine  QEMU's argument list: topology, NUMA nodes and distances, 9p shares
#   boot     QEMU under coreutils timeout; exit code from the control directory
set -euo pipefail

readonly HOST_PACKAGES=(qemu-system-x86 busybox-static cpio xz-utils)
# Modules the initramfs loads, dependencies first (computed from each .ko's "depends=").
readonly GUEST_MODULES=(virtio_pci 9pnet_virtio 9p overlay)
readonly EXIT_TIMEOUT=124 EXIT_VM_FAILED=125
# A guest that has not started COMMAND this long after QEMU started is stuck in its boot (seen
# under TCG on a loaded 2-core host: the 4-node guest's kernel in a soft lockup from 52 s on
# until the 600 s timeout, where a boot to COMMAND takes 2-3 s on a quiet host); it is stopped
# and booted once more.
# CPUTRAIN_NUMA_VM_BOOT_DEADLINE overrides the deadline (selftest.sh's stuck-boot case sets 0).
readonly BOOT_DEADLINE_S=${CPUTRAIN_NUMA_VM_BOOT_DEADLINE:-120} BOOT_ATTEMPTS=2

usage() {
  cat <<'EOF'
Usage: tests/numa-vm/run.sh [OPTIONS] -- COMMAND [ARGS...]
       tests/numa-vm/run.sh --setup-only
Runs COMMAND as root inside a QEMU guest with a multi-socket, multi-node NUMA topology,
in DIR (shared read-write at the same path), streaming its output (stdout and stderr
merged, on stdout). Must run as root.

Topology (CPUs are numbered socket-major; node i gets CPUs evenly, in order):
  --nodes N              NUMA nodes; a multiple or a divisor of --sockets     [2]
  --sockets N            sockets (packages)                                   [2]
  --cores-per-socket N   cores per socket                                     [2]
  --threads-per-core N   hardware threads per core                            [1]
  --mem-per-node SIZE    guest RAM per node (512M, 1G)                     [512M]
  --remote-distance D    SLIT distance between nodes of different sockets    [20]
  --near-distance D      SLIT distance between two nodes of one socket       [12]
                         (the local distance is always 10)
  --numa-balancing       leave automatic NUMA balancing on (off by default: it
                         migrates pages behind a placement test's back)
Run:
  --dir DIR              working directory, shared read-write             [$PWD]
  --env NAME[=VALUE]     export NAME to COMMAND; NAME alone copies the host's
                         value (repeatable; the guest starts from a clean
                         environment: PATH, HOME=/root, LANG=C.UTF-8)
  --timeout S            stop the guest after S seconds                     [900]
  --verbose              print setup steps, QEMU's command line and the guest
                         kernel log on stderr
  --setup-only           install packages, fetch the kernel, build the
                         initramfs; boot nothing
  --help                 this text

Exit code: COMMAND's; 124 on timeout; 125 if the VM failed before COMMAND
finished (the tail of the guest kernel log is printed on stderr).

Environment:
  CPUTRAIN_NUMA_VM_CACHE       cache directory     [/var/cache/cputrain-numa-vm]
  CPUTRAIN_NUMA_VM_KERNEL_PKG  Debian kernel package to boot
                               [the one linux-image-amd64 depends on, resolved once]
  CPUTRAIN_NUMA_VM_ACCEL       tcg, or kvm where the host has real VT-x/AMD-V  [tcg]
  CPUTRAIN_NUMA_VM_BOOT_DEADLINE  seconds a guest may take to start COMMAND before it
                               is stopped and booted once more                [120]
EOF
}

say() { echo "numa-vm: $*" >&2; }
note() { if [[ $verbose == 1 ]]; then say "$@"; fi; }
die() { say "$*"; exit "$EXIT_VM_FAILED"; }

# Everything created per run, removed by on_exit. QEMU runs under `timeout`, which forwards
# SIGTERM to QEMU, so killing timeout_pid is enough to stop the VM.
temp_paths=()
bg_pids=()
timeout_pid=''
# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
  local pid
  if [[ -n $timeout_pid ]]; then
    kill "$timeout_pid" 2>/dev/null || true
    wait "$timeout_pid" 2>/dev/null || true
  fi
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${bg_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((${#temp_paths[@]})); then rm -rf "${temp_paths[@]}"; fi
}

# ------------------------------------------------------------------------------- options
nodes=2 sockets=2 cores=2 threads=1 mem_per_node=512M remote_distance=20 near_distance=12
numa_balancing=0 workdir=$PWD timeout_s=900 verbose=0 setup_only=0
envs=() job_argv=()

parse_args() {
  while (($#)); do
    case $1 in
      --nodes|--sockets|--cores-per-socket|--threads-per-core|--mem-per-node|\
      --remote-distance|--near-distance|--dir|--env|--timeout)
        (($# >= 2)) || die "$1 needs a value"
        case $1 in
          --nodes) nodes=$2 ;;
          --sockets) sockets=$2 ;;
          --cores-per-socket) cores=$2 ;;
          --threads-per-core) threads=$2 ;;
          --mem-per-node) mem_per_node=$2 ;;
          --remote-distance) remote_distance=$2 ;;
          --near-distance) near_distance=$2 ;;
          --dir) workdir=$2 ;;
          --env) envs+=("$2") ;;
          --timeout) timeout_s=$2 ;;
        esac
        shift 2 ;;
      --numa-balancing) numa_balancing=1; shift ;;
      --verbose) verbose=1; shift ;;
      --setup-only) setup_only=1; shift ;;
      -h|--help) usage; exit 0 ;;
      --) shift; job_argv=("$@"); break ;;
      *) die "unknown option '$1' (COMMAND goes after --; see --help)" ;;
    esac
  done
}

# Checks the options and derives the topology: cpus, cpus_per_socket, cpus_per_node, mem_mib.
validate() {
  local name value
  for name in nodes sockets cores threads remote_distance near_distance timeout_s; do
    value=${!name}
    [[ $value =~ ^[1-9][0-9]*$ ]] || die "${name//_/-} must be a positive integer, not '$value'"
  done
  ((remote_distance > 10 && near_distance > 10 && remote_distance <= 255 && near_distance <= 255)) \
    || die "distances must lie in 11..255 (10 is the local distance)"
  cpus=$((sockets * cores * threads))
  cpus_per_socket=$((cores * threads))
  ((cpus % nodes == 0)) || die "$cpus CPUs cannot be split evenly over $nodes nodes"
  cpus_per_node=$((cpus / nodes))
  # A node never straddles a socket boundary or splits the threads of one core.
  ((nodes % sockets == 0 || sockets % nodes == 0)) \
    || die "--nodes ($nodes) must be a multiple or a divisor of --sockets ($sockets)"
  ((cpus_per_node % threads == 0)) || die "a node would split the threads of a core"
  local bytes
  bytes=$(numfmt --from=iec "${mem_per_node%[bB]}" 2>/dev/null) \
    || die "bad --mem-per-node '$mem_per_node' (use e.g. 512M or 1G)"
  ((bytes % 1048576 == 0 && bytes >= 64 * 1048576)) \
    || die "--mem-per-node must be a whole number of MiB, at least 64M"
  mem_mib=$((bytes / 1048576))
  ((setup_only || ${#job_argv[@]})) || die "no COMMAND (run.sh [OPTIONS] -- COMMAND [ARGS...])"
  workdir=$(cd -- "$workdir" 2>/dev/null && pwd -P) || die "--dir '$workdir' is not a directory"
  [[ $workdir != / ]] || die "--dir / cannot be shared read-write (it is the guest's root)"
  [[ $(id -u) == 0 ]] || die "must run as root (9p export of /, apt-get)"
}

# --------------------------------------------------------------------------------- setup
apt_get() {  # waits for another apt/dpkg run's lock instead of failing on it
  DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=1200 "$@" >&2
}

# A fresh CI image has no package lists: when a first try fails, update and try again.
apt_get_or_update() {
  apt_get "$@" || { apt_get update && apt_get "$@"; }
}

install_host_packages() {
  local missing=() pkg
  for pkg in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]}"
  apt_get_or_update install -y --no-install-recommends "${missing[@]}" \
    || die "apt-get install ${missing[*]} failed"
}

# The kernel package named by linux-image-amd64, e.g. linux-image-6.1.0-56-amd64 (the generic
# flavour: -cloud-amd64 lacks 9p).
resolve_kernel_package() {
  # shellcheck disable=SC2016  # $2 is awk's
  local pick='/Depends: linux-image-[0-9]/ { print $2; exit }' pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk "$pick")
  if [[ -z $pkg ]]; then
    apt_get update || true
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk "$pick")
  fi
  echo "$pkg"
}

# Sets kernel_dir: $cache/<package>/ holding `kernel` (what QEMU boots), `modules/` (the
# GUEST_MODULES closure, uncompressed, with `order`) and `release`. The package is resolved
# once and remembered in $cache/kernel-package, so later runs need no apt at all.
prepare_kernel() {
  local pkg=${CPUTRAIN_NUMA_VM_KERNEL_PKG:-}
  if [[ -z $pkg ]]; then
    pkg=$(cat "$cache/kernel-package" 2>/dev/null || true)
    if [[ -z $pkg || ! -f $cache/$pkg/ready ]]; then
      pkg=$(resolve_kernel_package)
      [[ -n $pkg ]] || die "apt-cache cannot resolve linux-image-amd64"
    fi
  fi
  kernel_dir=$cache/$pkg
  [[ -f $kernel_dir/ready ]] || unpack_kernel "$pkg"
  echo "$pkg" > "$cache/kernel-package"
}

unpack_kernel() {
  local pkg=$1 tmp deb root mdir out
  say "fetching $pkg with apt-get download (unpacked into $kernel_dir, not installed)"
  tmp=$(mktemp -d "$cache/.unpack.XXXXXX")
  temp_paths+=("$tmp")
  # APT::Sandbox::User=root: the _apt user cannot write into this root-only directory.
  (cd "$tmp" && apt_get_or_update -o APT::Sandbox::User=root download "$pkg") \
    || die "apt-get download $pkg failed"
  deb=$(find "$tmp" -maxdepth 1 -name '*.deb' | head -n1)
  root=$tmp/root out=$tmp/out
  dpkg-deb -x "$deb" "$root"
  mdir=$(find "$root/lib/modules" "$root/usr/lib/modules" -mindepth 1 -maxdepth 1 -type d \
           2>/dev/null | head -n1 || true)
  [[ -n $mdir ]] || die "$pkg holds no /lib/modules/<release>"
  mkdir -p "$out/modules"
  basename "$mdir" > "$out/release"
  copy_module_closure "$mdir" "$out/modules"
  extract_vmlinux "$root"/boot/vmlinuz-* "$out/kernel"
  rm -rf "$kernel_dir"
  mv "$out" "$kernel_dir"
  touch "$kernel_dir/ready"
  rm -rf "$tmp"
}

# Copies GUEST_MODULES and what they depend on, dependencies first, into $2 (one .ko per
# module, decompressed, and `order`). The dependencies come from each module's modinfo
# "depends=" string, so the host needs neither kmod nor depmod.
copy_module_closure() {
  local mdir=$1 dest=$2 m
  local -a order=()
  module_file() {  # file names may use '-' where module names use '_'
    find "$mdir/kernel" \( -name "${1//_/[-_]}.ko" -o -name "${1//_/[-_]}.ko.xz" \) | head -n1
  }
  module_bytes() { case $1 in *.xz) xz -dc "$1" ;; *) cat "$1" ;; esac; }
  visit() {
    local name=$1 file dep seen
    for seen in "${order[@]}"; do [[ $seen == "$name" ]] && return 0; done
    file=$(module_file "$name")
    if [[ -z $file ]]; then
      grep -Eq "/${name//_/[-_]}\.ko$" "$mdir/modules.builtin" && return 0
      die "kernel module $name is neither in $mdir nor built in"
    fi
    for dep in $(module_bytes "$file" | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '); do
      visit "$dep"
    done
    module_bytes "$file" > "$dest/$name.ko"
    order+=("$name")
  }
  for m in "${GUEST_MODULES[@]}"; do visit "$m"; done
  printf '%s\n' "${order[@]}" > "$dest/order"
}

# Writes to $2 the uncompressed ELF vmlinux inside bzImage $1: QEMU boots it directly through
# its PVH entry point, which under TCG is about 2 s faster than letting the guest decompress
# a bzImage. Debian compresses with xz; decompress from the first xz magic on, as the
# kernel's scripts/extract-vmlinux does. Falls back to the bzImage itself.
extract_vmlinux() {
  local bzimage=$1 dest=$2 offset
  [[ -f $bzimage ]] || die "no /boot/vmlinuz-* in the kernel package"
  offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bzimage" | head -n1 | cut -d: -f1 || true)
  if [[ -n $offset ]]; then
    tail -c +$((offset + 1)) "$bzimage" | xz -dc 2>/dev/null > "$dest" || true
    [[ $(head -c4 "$dest" | od -An -c | tr -d ' ') == 177ELF ]] && return 0
  fi
  say "could not extract an ELF vmlinux; booting the bzImage (slower under TCG)"
  cp "$bzimage" "$dest"
}

# PID 1 of the guest, run by busybox sh from the initramfs. The host's / (9p tag `host`,
# read-only) under a tmpfs overlay becomes the new root; --dir (tag `work`) is mounted over
# its own path read-write; the control directory (tag `ctl`) appears at /run/numa-vm. The job
# runs chrooted with an empty environment; its exit code goes to ctl/rc. If init fails, rc
# stays absent and the host reports 125 with the kernel log, which carries the reason.
read -r -d '' GUEST_INIT <<'INIT' || true
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
log() { echo "numa-vm-init: $*" > /dev/kmsg; }
fail() { echo "<2>numa-vm-init: FAILED: $*" > /dev/kmsg; poweroff -f; }
while read -r m; do insmod "/modules/$m.ko" || fail "insmod $m"; done < /modules/order
p9=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $p9,cache=none ctl /ctl || fail "mount ctl"
mount -t 9p -o $p9,ro,cache=loose host /lower || fail "mount host root"
mount -t tmpfs -o mode=0755 tmpfs /upper
mkdir /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot \
  || fail "mount overlay"
r=/newroot
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts devpts $r/dev/pts
mount -t tmpfs tmpfs $r/dev/shm
mount -t tmpfs tmpfs $r/tmp
mount -t tmpfs tmpfs $r/run
dir=$(cat /ctl/dir)
mkdir -p "$r$dir"
mount -t 9p -o $p9,cache=none work "$r$dir" || fail "mount $dir"
mkdir -p $r/run/numa-vm
mount --bind /ctl $r/run/numa-vm
ip link set lo up
log "running the job"
: > /ctl/started
env -i chroot $r /run/numa-vm/job
echo $? > /ctl/rc
log "job exited with $(cat /ctl/rc)"
poweroff -f
INIT

# Sets initramfs: busybox, GUEST_INIT and the modules, cached per kernel and per init text.
prepare_initramfs() {
  local tag tmp m
  tag=$(printf '%s' "$GUEST_INIT" | sha256sum | cut -c1-16)
  initramfs=$kernel_dir/initramfs-$tag.cpio.gz
  [[ -f $initramfs ]] && return 0
  note "building $initramfs"
  tmp=$(mktemp -d "$cache/.initramfs.XXXXXX")
  temp_paths+=("$tmp")
  mkdir -p "$tmp"/{bin,modules,proc,sys,dev,ctl,lower,upper,newroot}
  cp /bin/busybox "$tmp/bin/busybox"
  cp "$kernel_dir"/modules/* "$tmp/modules/"
  printf '%s\n' "$GUEST_INIT" > "$tmp/init"
  chmod 0755 "$tmp/init"
  (cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) > "$tmp.cpio.gz"
  # Images of other init versions stay: a run of another checkout may be about to boot one.
  mv "$tmp.cpio.gz" "$initramfs"
  rm -rf "$tmp"
}

# One setup at a time (parallel CI jobs share the cache). The lock is dropped before booting,
# so VMs themselves run in parallel.
setup() {
  cache=${CPUTRAIN_NUMA_VM_CACHE:-/var/cache/cputrain-numa-vm}
  mkdir -p "$cache"
  exec 9> "$cache/.lock"
  flock 9
  install_host_packages
  prepare_kernel
  prepare_initramfs
  exec 9>&-
  note "kernel $kernel_dir/kernel ($(cat "$kernel_dir/release")), initramfs $initramfs"
}

# ----------------------------------------------------------------------------------- job
# Sets ctl: the control directory shared with the guest (tag `ctl`, /run/numa-vm there).
#   dir   the working directory    job   the command as a script, run by the host's bash
#   out   the command's output     rc    its exit code, written when it finished
write_job() {
  local e
  ctl=$(mktemp -d /tmp/cputrain-numa-vm.XXXXXX)
  temp_paths+=("$ctl")
  printf '%s\n' "$workdir" > "$ctl/dir"
  : > "$ctl/out"
  {
    echo "#!$BASH"
    echo 'exec < /dev/null > /run/numa-vm/out 2>&1'
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    echo 'export HOME=/root LANG=C.UTF-8 TERM=dumb'
    for e in "${envs[@]}"; do
      [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*(=|$) ]] || die "bad --env '$e'"
      if [[ $e == *=* ]]; then
        printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"
      elif [[ -n ${!e+set} ]]; then
        printf 'export %s=%q\n' "$e" "${!e}"
      fi
    done
    printf 'cd %q || exit %d\n' "$workdir" "$EXIT_VM_FAILED"
    printf 'exec'
    printf ' %q' "${job_argv[@]}"
    printf '\n'
  } > "$ctl/job"
  chmod 0755 "$ctl/job"
}

# ------------------------------------------------------------------------------- machine
# Sets qemu: the full QEMU command line.
build_qemu_command() {
  local accel_args cpu node a b socket_a socket_b distance
  case ${CPUTRAIN_NUMA_VM_ACCEL:-tcg} in
    # TCG's "max" CPU: AVX2, FMA and BMI2 but no AVX-512 (so the project builds for
    # x86-64-v3). GenuineIntel because with the AMD vendor TCG cannot show SMT siblings
    # (it has no topoext), and --threads-per-core 2 would come out as separate cores.
    tcg) accel_args=(-accel "tcg,thread=multi" -cpu "max,vendor=GenuineIntel") ;;
    kvm) accel_args=(-accel kvm -cpu host) ;;
    *) die "CPUTRAIN_NUMA_VM_ACCEL must be tcg or kvm" ;;
  esac
  qemu=(qemu-system-x86_64 -nodefaults -no-user-config -machine q35 "${accel_args[@]}"
        -smp "$cpus,sockets=$sockets,cores=$cores,threads=$threads"
        -m "$((mem_mib * nodes))M")
  for ((node = 0; node < nodes; node++)); do
    qemu+=(-object "memory-backend-ram,id=ram$node,size=${mem_mib}M"
           -numa "node,nodeid=$node,memdev=ram$node")
  done
  local cpu_args
  for ((cpu = 0; cpu < cpus; cpu++)); do
    cpu_args="node-id=$((cpu / cpus_per_node)),socket-id=$((cpu / cpus_per_socket))"
    cpu_args+=",core-id=$((cpu % cpus_per_socket / threads)),thread-id=$((cpu % threads))"
    qemu+=(-numa "cpu,$cpu_args")
  done
  # QEMU mirrors each distance to the opposite direction.
  for ((a = 0; a < nodes; a++)); do
    for ((b = a + 1; b < nodes; b++)); do
      socket_a=$((a * cpus_per_node / cpus_per_socket))
      socket_b=$((b * cpus_per_node / cpus_per_socket))
      distance=$remote_distance
      if ((nodes > sockets && socket_a == socket_b)); then distance=$near_distance; fi
      qemu+=(-numa "dist,src=$a,dst=$b,val=$distance")
    done
  done
  # 9p: the host's / read-only, the control directory and --dir read-write. multidevs=remap
  # keeps inode numbers unique across the host's mounts.
  add_9p() {  # mount tag, host path, extra -fsdev options
    qemu+=(-fsdev "local,id=fs_$1,path=${2//,/,,},security_model=none,multidevs=remap$3"
           -device "virtio-9p-pci,fsdev=fs_$1,mount_tag=$1")
  }
  add_9p host / ,readonly=on
  add_9p ctl "$ctl" ''
  add_9p work "$workdir" ''
  # lpj= skips the per-CPU delay-loop calibration (2-3 s under TCG).
  local cmdline="console=ttyS0 panic=-1 rdinit=/init mitigations=off lpj=4000000"
  cmdline+=" loglevel=$([[ $verbose == 1 ]] && echo 6 || echo 3)"
  if [[ $numa_balancing == 0 ]]; then cmdline+=" numa_balancing=disable"; fi
  qemu+=(-display none -no-reboot -serial "file:$ctl/console.log"
         -kernel "$kernel_dir/kernel" -initrd "$initramfs" -append "$cmdline")
}

# ---------------------------------------------------------------------------------- boot
# One boot: streams the output and sets qemu_rc; stuck=1 if the guest did not start COMMAND
# within BOOT_DEADLINE_S (the guest init writes ctl/started just before it).
boot_once() {
  local pid started
  : > "$ctl/console.log"
  rm -f "$ctl/started" "$ctl/stuck"
  started=$(date +%s%N)
  qemu_rc=0
  # coreutils timeout rather than a shell watchdog: a background `sleep` would hold the
  # caller's stdout pipe open after we exit.
  timeout --kill-after=10 "$timeout_s" "${qemu[@]}" < /dev/null > "$ctl/qemu.log" 2>&1 &
  timeout_pid=$!
  # tail exits once QEMU is gone and everything written has been printed.
  tail -c +1 -f -s 0.1 --pid="$timeout_pid" "$ctl/out" &
  bg_pids+=($!)
  if [[ $verbose == 1 ]]; then
    tail -c +1 -f -s 0.1 --pid="$timeout_pid" "$ctl/console.log" >&2 &
    bg_pids+=($!)
  fi
  # The boot watcher: gone within a second of QEMU (its output closed, so it holds no pipe).
  (
    deadline=$((SECONDS + BOOT_DEADLINE_S))
    while kill -0 "$timeout_pid" 2>/dev/null && [[ ! -e $ctl/started ]]; do
      if ((SECONDS >= deadline)); then
        : > "$ctl/stuck"
        kill "$timeout_pid"
        break
      fi
      sleep 1
    done
  ) > /dev/null 2>&1 < /dev/null &
  bg_pids+=($!)
  wait "$timeout_pid" || qemu_rc=$?
  timeout_pid=''
  for pid in "${bg_pids[@]}"; do wait "$pid" || true; done
  bg_pids=()
  stuck=0
  [[ -e $ctl/stuck ]] && stuck=1
  note "the VM ran $((($(date +%s%N) - started) / 1000000)) ms; qemu exit code $qemu_rc"
}

# Boots (again, once, if the boot got stuck), and exits with the job's exit code (or 124 / 125).
boot() {
  local qemu_rc stuck attempt
  note "${qemu[*]}"
  for ((attempt = 1; attempt <= BOOT_ATTEMPTS; attempt++)); do
    boot_once
    ((stuck == 1)) || break
    say "the guest had not started COMMAND ${BOOT_DEADLINE_S}s after boot (attempt $attempt of" \
      "$BOOT_ATTEMPTS)"
    if ((attempt < BOOT_ATTEMPTS)); then
      say "the guest kernel log ends with:"
      tail -n 10 "$ctl/console.log" >&2
    fi
  done
  if [[ -s $ctl/rc ]]; then
    exit "$(cat "$ctl/rc")"
  fi
  if ((stuck == 1 || qemu_rc == 124 || qemu_rc == 137)); then
    ((stuck == 1)) || say "timeout after ${timeout_s}s"
    if [[ -s $ctl/console.log ]]; then
      say "the guest kernel log ends with:"
      tail -n 20 "$ctl/console.log" >&2
    fi
    exit "$EXIT_TIMEOUT"
  fi
  say "the VM stopped before COMMAND finished (qemu exit code $qemu_rc)"
  if [[ -s $ctl/qemu.log ]]; then tail -n 20 "$ctl/qemu.log" >&2; fi
  say "the guest kernel log ends with:"
  tail -n 40 "$ctl/console.log" >&2
  exit "$EXIT_VM_FAILED"
}

main() {
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  parse_args "$@"
  validate
  setup
  if [[ $setup_only == 1 ]]; then
    say "ready: $kernel_dir ($(cat "$kernel_dir/release"))"
    exit 0
  fi
  write_job
  build_qemu_command
  boot
}

# bash reads a whole function before running it, so editing this file while a VM runs does
# not disturb the running script.
main "$@"
