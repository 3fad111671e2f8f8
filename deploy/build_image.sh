#!/usr/bin/env bash
# Builds the deploy/ image (what deploy/Dockerfile describes) and checks it.
#   With a working Docker daemon: `docker build -f deploy/Dockerfile`.
#   Without one (CI, and the machines this was written on): with Debian's own tools, the same
#   runtime stage from the .deb of BUILD_DIR (which must have the MPI bridge):
#     1. cpack -G DEB in BUILD_DIR (binary, MPI benchmark worker, configs, GPT-2 vocabulary;
#        Depends from dpkg-shlibdeps, libopenmpi3 included);
#     2. mmdebstrap --variant=minbase bookworm with the Dockerfile's runtime packages, the .deb,
#        and the Dockerfile's remaining steps as customize hooks (user mpiuser uid 1000, sshd
#        and ssh configs for the MPI Operator, the entry point, no ssh host keys);
#     3. umoci: an OCI image layout (OUT_DIR/oci, tag cputrain-numa:ci) from that root, with the
#        Dockerfile's ENTRYPOINT, CMD, USER, WORKDIR and EXPOSE; `skopeo copy oci:... docker://`
#        or `podman load` push or load it;
#     4. the check: the image unpacked again by umoci, and in it, as mpiuser: the entry point
#        runs `cputrain-numa --help`; no library is missing (ldd); `mpirun -n 2` (a core each)
#        trains the reference fixture for 6 steps across 2 ranks through the MPI bridge.
# Usage: deploy/build_image.sh BUILD_DIR [OUT_DIR (default BUILD_DIR/image)]. Root; network
# access to the Debian mirror. ~2-3 minutes.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:?usage: build_image.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-$build/image}
fail() { echo "FAILED: $*"; exit 1; }
t0=$(date +%s)
since() { echo "$(($(date +%s) - t0)) s"; }

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  docker build -f "$src/deploy/Dockerfile" -t cputrain-numa:ci "$src"
  docker run --rm cputrain-numa:ci cputrain-numa --help >/dev/null
  echo "build_image: built with docker in $(since)"
  exit 0
fi
echo "build_image: no Docker daemon; building with mmdebstrap and umoci"
[ "$(id -u)" = 0 ] || fail "needs root (mmdebstrap's root mode, chroot)"
grep -qx 'CPUTRAIN_HAVE_MPI:INTERNAL=ON' "$build/CMakeCache.txt" ||
  fail "$build has no MPI bridge: the image is for multi-node runs (configure with -DCPUTRAIN_MPI=ON)"

echo "-- 1. cpack"
cmake --build "$build" -j "$(nproc)" --target cputrain-numa cputrain-bench-mpi >/dev/null
rm -f "$build"/cputrain-numa_*.deb
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls "$build"/cputrain-numa_*_amd64.deb)
echo "   $(basename "$deb"); Depends: $(dpkg-deb -f "$deb" Depends)"

echo "-- 2. root file system (mmdebstrap)"
rm -rf "$out"
mkdir -p "$out"
# The Dockerfile's runtime packages besides the libraries (which the .deb's Depends bring). The
# mirror is named here, unlike the test roots' (tests/install/debian_root.sh, which take this
# machine's apt sources): the image ships its sources.list, which should be Debian's public
# mirror, as the Dockerfile's debian base image has, not the build machine's.
# This machine's apt download cache seeds the root's (mmdebstrap's documented way to use a local
# package cache): apt verifies each file against the mirror's index and downloads the rest; the
# image's own cache is emptied at the end as always.
# dpkg skips its fsync calls while the root is made (force-unsafe-io: the root is packed into a
# tarball at the end, never recovered after a crash; minutes of a CI run); the option's file is
# removed again, so the image's own dpkg syncs as Debian's does.
mmdebstrap --variant=minbase --quiet --dpkgopt=force-unsafe-io \
  --include=openmpi-bin,openssh-server,openssh-client,hwloc-nox,numactl \
  --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
  --setup-hook='for d in /var/cache/apt/archives/*.deb; do [ -e "$d" ] || continue; cp -l "$d" "$1/var/cache/apt/archives/" 2>/dev/null || cp "$d" "$1/var/cache/apt/archives/"; done' \
  --customize-hook="copy-in $deb /tmp" \
  --customize-hook='chroot "$1" sh -c "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/cputrain-numa_*.deb >/dev/null && rm /tmp/cputrain-numa_*.deb"' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
  --customize-hook='chroot "$1" useradd --create-home --uid 1000 --shell /bin/bash mpiuser' \
  --customize-hook='mkdir -p "$1/var/run/sshd"' \
  --customize-hook="upload $src/deploy/image/ssh_config /etc/ssh/ssh_config.d/mpi-operator.conf" \
  --customize-hook="upload $src/deploy/image/sshd_config /home/mpiuser/.sshd_config" \
  --customize-hook='chroot "$1" chown mpiuser:mpiuser /home/mpiuser/.sshd_config' \
  --customize-hook="upload $src/deploy/image/entrypoint.sh /usr/local/bin/cputrain-entrypoint" \
  --customize-hook='chmod 0755 "$1/usr/local/bin/cputrain-entrypoint"' \
  --customize-hook='rm -f "$1/etc/dpkg/dpkg.cfg.d/99mmdebstrap"' \
  bookworm "$out/rootfs.tar" http://deb.debian.org/debian
echo "   rootfs.tar: $(du -m "$out/rootfs.tar" | cut -f1) MiB, at $(since)"

echo "-- 3. OCI image (umoci)"
img=$out/oci:cputrain-numa
umoci init --layout "$out/oci"
umoci new --image "$img"
umoci unpack --image "$img" "$out/bundle" >/dev/null
tar -C "$out/bundle/rootfs" -xf "$out/rootfs.tar"
umoci repack --image "$img" "$out/bundle"
rm -rf "$out/bundle"
umoci config --image "$img" --tag ci --config.user mpiuser --config.workingdir /home/mpiuser \
  --config.exposedports 2222/tcp --config.entrypoint /usr/local/bin/cputrain-entrypoint \
  --config.cmd cputrain-numa --config.cmd --help \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
umoci rm --image "$img"  # keep only the configured tag, cputrain-numa:ci
echo "   $out/oci (tag cputrain-numa:ci): $(du -sm "$out/oci" | cut -f1) MiB, at $(since)"

echo "-- 4. check the image"
check=$out/check
umoci unpack --image "$out/oci:ci" "$check" >/dev/null
mkdir -p "$check/rootfs/tmp/fixture"
cp "$src"/tests/reference/fixtures/odd/{config.yaml,model.bin,train.bin,val.bin} "$check/rootfs/tmp/fixture/"
chmod -R a+rX "$check/rootfs/tmp/fixture"
unshare -m bash -s -- "$check/rootfs" <<'NS' || fail "the image's check (above)"
set -euo pipefail
r=$1
mount --make-rprivate /
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o size=256m none "$r/dev/shm"
as_user() { chroot --userspec=1000:1000 "$r" env HOME=/home/mpiuser PATH=/usr/local/bin:/usr/bin:/bin "$@"; }
as_user /usr/local/bin/cputrain-entrypoint cputrain-numa --help >/dev/null
if chroot "$r" ldd /usr/bin/cputrain-numa | grep 'not found'; then exit 1; fi
[ -f "$r/usr/share/cputrain-numa/gpt2/encoder.json" ] || { echo "no GPT-2 vocabulary"; exit 1; }
[ -z "$(ls "$r"/etc/ssh/ssh_host_* 2>/dev/null)" ] || { echo "ssh host keys left in the image"; exit 1; }
# Two ranks on this one host: mpirun's default binding gives each its own core, as in
# tests/mpi/mpi_tests.sh (with --bind-to none both would pin CPU 0: exit 2 by design).
as_user sh -c 'cd /tmp && mpirun -n 2 --oversubscribe --mca btl self,vader \
  cputrain-numa train --config /tmp/fixture/config.yaml --progress quiet \
  --set model.init_from=/tmp/fixture/model.bin --set data.train=/tmp/fixture/train.bin \
  --set data.val=/tmp/fixture/val.bin --set train.out_dir=/tmp/run --set train.steps=6' >/tmp/image-mpirun.log 2>&1 ||
  { cat /tmp/image-mpirun.log; exit 1; }
grep -q '"step":6' "$r/tmp/run/metrics.jsonl" || { echo "no step 6 in metrics.jsonl"; exit 1; }
grep -q 'MPI bridge: 2 processes' /tmp/image-mpirun.log || { cat /tmp/image-mpirun.log; echo "the bridge did not join 2 ranks"; exit 1; }
NS
rm -rf "$check" "$out/rootfs.tar"
# The image's config, as a registry would serve it: index -> manifest -> config blob.
python3 - "$out/oci" <<'PY' || fail "the image config (above)"
import json, sys
oci = sys.argv[1]
blob = lambda d: json.load(open(f"{oci}/blobs/{d.replace(':', '/')}"))
index = json.load(open(f"{oci}/index.json"))
ref = [m for m in index["manifests"]
       if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "ci"]
assert len(ref) == 1, f"tag ci: {len(ref)} manifests"
c = blob(blob(ref[0]["digest"])["config"]["digest"])["config"]
want = {"User": "mpiuser", "WorkingDir": "/home/mpiuser",
        "Entrypoint": ["/usr/local/bin/cputrain-entrypoint"], "Cmd": ["cputrain-numa", "--help"]}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
assert not bad and "2222/tcp" in c.get("ExposedPorts", {}), f"config differs: {bad} {c}"
print(f"   config: user {c['User']}, entrypoint {c['Entrypoint'][0]}, port 2222")
PY
echo "build_image: passed in $(since): $out/oci, tag cputrain-numa:ci"
