#!/usr/bin/env bash
# Installs what cputrain-numa needs, by need (one list per mode below), from Debian's packages
# and PyPI only (no npm, no model or data hub):
#   --runtime     run a built binary, and the quickstart's corpus (the Bible text)
#   --build       compile it (compiler, CMake, the -dev packages, oneDNN: the fp32 products where
#                 OpenBLAS runs narrower kernels than the CPU has, docs/bf16.md); without --mpi
#                 the bridge is left out (CPUTRAIN_MPI=auto finds no MPI)
#   --mpi         the multi-node bridge: Open MPI to build with and mpirun to launch
#   --bench       oneDNN alone (part of --build since it runs fp32 products by itself: kept for
#                 the commands that name it): libdnnl-dev and the OpenCL headers its CMake
#                 config requires
#   --gpt2-vocab  the GPT-2 vocabulary for `--tokenizer gpt2`: pip downloads the openai-whisper
#                 source distribution from PyPI, its gpt2.tiktoken (SHA-256 checked) becomes
#                 third_party/gpt2/{encoder.json,vocab.bpe} (scripts/gpt2_vocab.py)
#   --peers       the peers' Python environment (scripts/peers-requirements.txt, pinned): PyTorch
#                 2.x, Intel Extension for PyTorch, transformers, peft, tokenizers, tiktoken, ...
#                 as a venv made by Debian's python3, cached outside the clone (scripts/peers-env.sh
#                 prints where) and rebuilt only when the requirements file changes
#   --llama-cpp   llama.cpp for the GGUF checks: llama-cpp-python built from its pinned PyPI
#                 source distribution (its vendored llama.cpp gives convert_hf_to_gguf.py and
#                 gguf-py) into a cache outside the clone (scripts/llama-cpp-env.sh); needs
#                 --build's compiler and the peers' environment, so it brings both
#   --test        everything CI needs: all of the above plus the test tools (GoogleTest, Debian's
#                 PyTorch 1.13 for the committed fixtures, clang, QEMU, mmdebstrap, ...). The
#                 default when no mode is given.
#   --dry-run     print what the chosen modes would install (packages, installed size), and stop
# Before installing it prints the count and installed size of what is missing. Idempotent:
# packages already present are skipped, so a second run is a no-op.
# Must run as root (or with sudo available) on Debian bookworm. scripts/quickstart.sh runs it
# with --build --runtime; scripts/test.sh (CI) with --test. README.md lists the measured sizes.
set -euo pipefail

# Run a built binary: the libraries `ldd cputrain-numa` resolves to (libopenblas0-pthread is the
# OpenBLAS the binary's RPATH names: docs/machine-notes.md, the serial variant is unsafe with concurrent
# callers), and the quickstart's corpus (public domain): `bible -f Gen1:1-Rev22:21` prints it.
RUNTIME=(
  libhwloc15 libnuma1 libjemalloc2 libopenblas0-pthread libtbb12 libyaml-cpp0.7 libfmt9 libdnnl2
  bible-kjv bible-kjv-text
)
# oneDNN (Debian's 2.6.3, on OpenMP): the fp32 products where OpenBLAS is held to 256-bit kernels
# on an AVX-512 CPU (train.fp32_kernel: auto, kernels/kernels.h), bench gemm's onednn rows and the
# kernels a config may name (train.bf16_kernel / train.fp32_kernel: onednn). Its
# dnnl-config.cmake calls find_dependency(OpenCL), so the OpenCL headers and loader are part of it.
BENCH=(libdnnl-dev ocl-icd-opencl-dev opencl-c-headers)
# Build it (Debian's default pthread OpenBLAS; CLI11 and nlohmann-json are header-only; oneDNN).
# build-essential brings dpkg-dev, whose dpkg-shlibdeps CPack's .deb uses.
BUILD=(
  build-essential cmake pkg-config
  libhwloc-dev libnuma-dev libjemalloc-dev libopenblas-dev libopenblas0-pthread libtbb-dev
  libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev "${BENCH[@]}"
)
# The multi-node bridge (CPUTRAIN_MPI): Open MPI's headers and libraries, and mpirun.
MPI=(libopenmpi-dev openmpi-bin)
# pip (to download one source distribution from PyPI) and the CA certificates it checks PyPI's
# with; scripts/gpt2_vocab.py needs only Python's standard library.
GPT2_VOCAB=(python3 python3-pip ca-certificates)
# A virtual environment made by Debian's python3, filled by pip from PyPI.
PEERS=(python3 python3-venv ca-certificates)
# Everything else CI runs (scripts/test.sh).
TEST=(
  git hwloc numactl
  # one compiler cache across CI's builds (scripts/test.sh): the .deb's build and the fresh
  # root's test build compile what the Release build compiled, with its flags
  ccache
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # format check (scripts/check_format.sh: clang-format 14, bookworm's default). The gcc
  # sanitizer runtimes of the ASan+UBSan and TSan builds (libasan8, libubsan1, liblsan0,
  # libtsan2) come with build-essential's g++ (libgcc-12-dev depends on them).
  clang-format
  # fuzzers (tests/fuzz): clang, and libclang-rt-14-dev for libFuzzer and clang's sanitizer
  # runtimes (only recommended, by libclang-common-14-dev: --no-install-recommends leaves it out)
  clang libclang-rt-14-dev
  # the committed PyTorch fixtures (tests/reference: regenerated bit for bit by Debian's PyTorch
  # 1.13, which made them); the OpenMP OpenBLAS it runs best with
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

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
modes=() dry_run=0
for arg in "$@"; do
  case "$arg" in
    --runtime | --build | --mpi | --bench | --gpt2-vocab | --peers | --llama-cpp | --test)
      modes+=("${arg#--}") ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install-deps: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done
[ "${#modes[@]}" -gt 0 ] || modes=(test)

packages=() want_vocab=0 want_peers=0 want_llama_cpp=0
for m in "${modes[@]}"; do
  case "$m" in
    runtime) packages+=("${RUNTIME[@]}") ;;
    build) packages+=("${BUILD[@]}") ;;
    mpi) packages+=("${MPI[@]}") ;;
    bench) packages+=("${BENCH[@]}") ;;
    gpt2-vocab) packages+=("${GPT2_VOCAB[@]}"); want_vocab=1 ;;
    peers) packages+=("${PEERS[@]}"); want_peers=1 ;;
    llama-cpp) packages+=("${BUILD[@]}" "${PEERS[@]}"); want_peers=1 want_llama_cpp=1 ;;
    test) packages+=("${RUNTIME[@]}" "${BUILD[@]}" "${MPI[@]}" "${GPT2_VOCAB[@]}"
                     "${PEERS[@]}" "${TEST[@]}")
          want_vocab=1 want_peers=1 want_llama_cpp=1 ;;
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

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The GPT-2 BPE vocabulary: OpenAI's gpt2.tiktoken (GPT-2's 50,256 merge ranks; the ranks are the
# ids of encoder.json, and vocab.bpe follows from them) as shipped in the openai-whisper source
# distribution on PyPI. Only that one file is taken (nothing is installed); its SHA-256 is pinned.
WHISPER_SDIST=openai-whisper==20250625
GPT2_TIKTOKEN_SHA256=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
vocab_dir="$here/third_party/gpt2"
if [ "$want_vocab" = 1 ] && { [ ! -f "$vocab_dir/encoder.json" ] || [ ! -f "$vocab_dir/vocab.bpe" ]; }; then
  echo "install-deps: GPT-2 vocabulary from PyPI ($WHISPER_SDIST source distribution) into $vocab_dir"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" "$WHISPER_SDIST"
  tar -xzf "$tmp"/openai_whisper-*.tar.gz -C "$tmp" --wildcards '*/whisper/assets/gpt2.tiktoken'
  ranks=$(ls "$tmp"/openai_whisper-*/whisper/assets/gpt2.tiktoken)
  echo "$GPT2_TIKTOKEN_SHA256  $ranks" | sha256sum --check --quiet ||
    { echo "install-deps: gpt2.tiktoken's SHA-256 is not the pinned one" >&2; exit 1; }
  mkdir -p "$vocab_dir"
  cp "$ranks" "$vocab_dir/gpt2.tiktoken"
  python3 "$here/scripts/gpt2_vocab.py" "$vocab_dir/gpt2.tiktoken" "$vocab_dir"
  rm -rf "$tmp"
  trap - EXIT
fi

# The peers' environment (scripts/peers-env.sh: where, and whether it is current).
if [ "$want_peers" = 1 ]; then
  bash "$here/scripts/peers-env.sh" --install
fi

# llama.cpp's environment for the GGUF checks (scripts/llama-cpp-env.sh: where, whether current),
# built with the peers' Python, 2 compile jobs.
if [ "$want_llama_cpp" = 1 ]; then
  bash "$here/scripts/llama-cpp-env.sh" --install
fi
echo "install-deps: done"
