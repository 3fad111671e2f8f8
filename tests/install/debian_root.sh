# Sourced by the tests that need a fresh Debian bookworm root (deb_test.sh, fresh_root_test.sh):
# a minbase root made by mmdebstrap from this machine's own apt configuration, and a way to run a
# script inside it as root. Needs root, mmdebstrap, unshare and chroot.
#
# The root holds what mmdebstrap's minbase variant holds (apt, dpkg, bash, coreutils: no
# compiler, no Python, no CA certificates), which is less than a new machine of this project's
# kind has, so anything the project's scripts forget to install is missing there. What it takes
# from this machine is only its network configuration, as a user's machine has it:
#   - the Debian mirror: the enabled apt sources of this machine for bookworm (sources.list and
#     sources.list.d), passed to mmdebstrap as they are, so the root uses the same mirror with
#     no address written into the project; apt's Acquire:: options (a snapshot mirror needs
#     Check-Valid-Until false, say) come along too;
#   - DNS (/etc/resolv.conf), pip's configuration (/etc/pip.conf) and the machine's local CA
#     certificates (/usr/local/share/ca-certificates: an egress proxy's, say), which the root's
#     ca-certificates package adds to its bundle when a mode installs it.

# debian_sources: sets DEBIAN_MIRRORS (this machine's enabled apt source files for bookworm, to
# pass to mmdebstrap as its MIRROR arguments) and DEBIAN_APTOPTS (--aptopt=FILE for each apt
# configuration file with Acquire:: options).
debian_sources() {
  local f
  DEBIAN_MIRRORS=() DEBIAN_APTOPTS=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && grep -v '^[[:space:]]*#' "$f" | grep -qw bookworm && DEBIAN_MIRRORS+=("$f")
  done
  if [ "${#DEBIAN_MIRRORS[@]}" = 0 ]; then
    echo "debian_sources: no enabled apt source for bookworm in /etc/apt (this machine's mirror)" >&2
    return 1
  fi
  for f in /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] && grep -q '^[[:space:]]*Acquire::' "$f" && DEBIAN_APTOPTS+=("--aptopt=$f")
  done
  return 0
}

# debian_minbase TARBALL: a minbase bookworm root as a tarball, made once and reused for a week.
debian_minbase() {
  local tarball=$1
  if [ -s "$tarball" ] && [ -z "$(find "$tarball" -mtime +7)" ]; then return 0; fi
  debian_sources
  mkdir -p "$(dirname "$tarball")"
  rm -rf "$tarball" "$tarball.tmp"
  # mmdebstrap picks its output format from the name: say tar, since the temporary name is not
  # *.tar (a plain *.tmp became a directory on a clean CI machine).
  mmdebstrap --variant=minbase --format=tar --quiet ${DEBIAN_APTOPTS[@]+"${DEBIAN_APTOPTS[@]}"} \
    bookworm "$tarball.tmp" "${DEBIAN_MIRRORS[@]}"
  mv "$tarball.tmp" "$tarball"
}

# debian_root_unpack TARBALL ROOT: the root in directory ROOT, with this machine's DNS, pip
# configuration and local CA certificates. dpkg in it skips its fsync calls (force-unsafe-io, as
# Docker's Debian images have it): a test root is thrown away, never recovered after a crash, and
# syncing each of ~100,000 unpacked files cost minutes of a CI run.
debian_root_unpack() {
  local tarball=$1 root=$2
  tar -C "$root" -xf "$tarball"
  mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
  echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/cputrain-test-unsafe-io"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
}

# debian_root_apt_archives ROOT: this machine's downloaded packages (/var/cache/apt/archives/*.deb,
# what its own apt-get install left there) linked into ROOT's apt cache, as a local mirror would
# serve them: apt in the root still resolves, verifies (each file against the root's own package
# index, by size and SHA-256) and installs what the project's scripts ask for, and downloads
# only what it does not find there. Hard links (the same file system), else nothing.
debian_root_apt_archives() {
  local root=$1
  compgen -G '/var/cache/apt/archives/*.deb' >/dev/null || return 0
  mkdir -p "$root/var/cache/apt/archives"
  cp -l /var/cache/apt/archives/*.deb "$root/var/cache/apt/archives/" 2>/dev/null || true
}

# debian_root_run ROOT SCRIPT [VAR=VALUE...]: runs SCRIPT (a path inside the root) with bash as
# root in ROOT, in a private mount namespace with /proc, /sys and /dev, with an environment of
# its own (PATH, HOME, LANG and the given variables: nothing else of this machine's).
debian_root_run() {
  local root=$1 script=$2
  shift 2
  unshare -m bash -s -- "$root" "$script" "$@" <<'NS'
set -euo pipefail
root=$1 script=$2
shift 2
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
exec env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" \
  chroot "$root" /bin/bash "$script"
NS
}
