#!/usr/bin/env bash
# The .deb (CPack, Depends from dpkg-shlibdeps) installed on a fresh Debian bookworm, and the
# quickstart run from it. Run by scripts/test.sh as root; ~5-8 minutes on 2 cores, most of it
# the build.
#   1. build the light binary: -DCPUTRAIN_MPI=OFF, no tests, no benchmarks (build-deb/);
#      tests/cli/mpi_build_test.sh on it: no libmpi linked, mpirun's environment refused;
#   2. cpack -G DEB: cputrain-numa_<version>_amd64.deb; its Depends must name the libraries
#      and no MPI;
#   3. a minimal bookworm root made by Debian's mmdebstrap (--variant=minbase, from this
#      machine's own apt sources: tests/install/debian_root.sh; cached for a week), unpacked to a
#      temporary directory;
#   4. in that root (chroot, in a private mount namespace with /proc, /sys and /dev):
#      `apt-get install ./cputrain-numa.deb bible-kjv`, then the quickstart's steps on the
#      Bible text (prepare-data --tokenizer bytes, train the built-in config for 60 steps,
#      generate), and `prepare-data --tokenizer gpt2`: the root has no clone at all, so the
#      vocabulary must come from the package. The loss must fall.
# Usage: tests/install/deb_test.sh [BUILD_DIR (default build-deb)]. Needs root, mmdebstrap and
# network access to the Debian mirror (scripts/install-deps.sh --test installs mmdebstrap).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/install/debian_root.sh
. "$src/tests/install/debian_root.sh"
build=${1:-$src/build-deb}
fail() { echo "FAILED: $*"; exit 1; }
t0=$(date +%s)
since() { echo "$(($(date +%s) - t0)) s"; }
[ "$(id -u)" = 0 ] || fail "needs root (chroot, mount)"

echo "-- deb_test: 1. build without MPI ($build)"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCPUTRAIN_WERROR=ON -DCPUTRAIN_MPI=OFF \
  -DCPUTRAIN_BUILD_TESTS=OFF -DCPUTRAIN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target cputrain-numa >/dev/null
bash "$src/tests/cli/mpi_build_test.sh" "$build"
echo "   built in $(since)"

echo "-- deb_test: 2. cpack"
rm -f "$build"/cputrain-numa_*.deb
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls "$build"/cputrain-numa_*_amd64.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "   $(basename "$deb"): $(du -k "$deb" | cut -f1) KiB; Depends: $depends"
for lib in libhwloc15 libnuma1 libjemalloc2 libopenblas0-pthread libtbb12 libyaml-cpp0.7 libfmt9; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
if grep -qi "mpi" <<<"$depends"; then fail "a build without MPI depends on MPI: $depends"; fi
contents=$(dpkg-deb -c "$deb")
grep -q './usr/share/cputrain-numa/gpt2/encoder.json' <<<"$contents" ||
  fail "the .deb lacks the GPT-2 vocabulary (scripts/install-deps.sh --gpt2-vocab, then reconfigure)"

echo "-- deb_test: 3. a minimal bookworm root (mmdebstrap)"
tarball=${XDG_CACHE_HOME:-$HOME/.cache}/cputrain-numa/minbase-bookworm.tar
debian_minbase "$tarball"
root=$(mktemp -d /tmp/cputrain-deb-root.XXXXXX)
trap 'rm -rf --one-file-system "$root"' EXIT
debian_root_unpack "$tarball" "$root"
debian_root_apt_archives "$root"
cp "$deb" "$root/tmp/cputrain-numa.deb"
echo "   root ready in $(since): $(du -sm "$root" | cut -f1) MiB"

echo "-- deb_test: 4. install and run in the root"
cat >"$root/tmp/inside.sh" <<'INSIDE'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
before=$(dpkg-query -W -f='${Installed-Size}\n' | awk '{s += $1} END {print s}')
apt-get install -y -q --no-install-recommends /tmp/cputrain-numa.deb bible-kjv >/tmp/apt.log
grep -E '^[0-9]+ upgraded, [0-9]+ newly installed' /tmp/apt.log
after=$(dpkg-query -W -f='${Installed-Size}\n' | awk '{s += $1} END {print s}')
echo "   installed size grew by $(((after - before + 512) / 1024)) MiB"
if dpkg -l | grep -qi openmpi; then echo "Open MPI came with the package"; exit 1; fi
cd /root
mkdir -p data/kjv
bible -f Gen1:1-Rev22:21 </dev/null >data/kjv/kjv.txt
cputrain-numa prepare-data --tokenizer bytes -o data/kjv data/kjv/kjv.txt
cputrain-numa train --progress lines --set train.steps=60 --set train.eval_every=30 \
  --set train.eval_batches=4 --set train.checkpoint_every=0
cputrain-numa generate --checkpoint out/quickstart --tokenizer bytes --prompt "And God said" \
  --tokens 80 --seed 7
head -c 20000 data/kjv/kjv.txt >/tmp/small.txt
cputrain-numa prepare-data --tokenizer gpt2 -o /tmp/gpt2 /tmp/small.txt
ls /usr/share/cputrain-numa/configs
INSIDE
debian_root_run "$root" /tmp/inside.sh 2>&1 | tee "$build/deb_test.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail "inside the root (above)"
python3 - "$root/root/out/quickstart/metrics.jsonl" <<'PY' || fail "the loss did not fall"
import json, sys
val = [r["val_loss"] for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
print(f"   val loss {val[0]:.4f} -> {val[-1]:.4f}")
sys.exit(0 if len(val) >= 2 and val[-1] < val[0] - 0.5 else 1)
PY
echo "deb_test: passed in $(since)"
