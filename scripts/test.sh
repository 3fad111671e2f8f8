#!/usr/bin/env bash
# The README's second command: installs what is missing, builds, and runs the whole test suite.
#   1. Debian packages, the GPT-2 vocabulary, the peers' Python environment (PyTorch 2.x,
#      transformers, tiktoken from PyPI) and llama.cpp's (llama-cpp-python built from its PyPI
#      source distribution) (scripts/install-deps.sh --test, idempotent; both environments are
#      cached outside the clone: scripts/peers-env.sh, scripts/llama-cpp-env.sh)
#   2. format check: every tracked C/C++ file as clang-format 14 formats it (check_format.sh)
#   3. Release build with -Wall -Wextra -Werror, then the tests whose point is the shipped code:
#      every `numerics` test (parity with PyTorch, transformers, peft, TRL and llama.cpp, finite
#      differences: the -march kernels and jemalloc as shipped), the allocator's jemalloc arenas
#      (ASan builds map memory directly), the benchmarks' harness against PyTorch, the source
#      checks (module_boundaries, function_length), the tests registered only there (the AMX
#      tile model interpreted element by element: minutes under ASan; bf16 over 1000 steps;
#      mpirun's binding) and two whose point is time (the chat templates' default step budget
#      ends a 10^10-step loop in seconds; a vocabulary of millions of ids loads in linear time)
#   3b. a foreign CPU: OPENBLAS_CORETYPE=Prescott (OpenBLAS's SSE3 fallback on a CPU it does not
#      know): the quickstart's training shortened and a bench row must run, per class of
#      products, the fastest kernel auto measured (tests/cli/foreign_cpu_test.sh)
#   4. an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan: clang, with libFuzzer's
#      coverage instrumentation for step 5) running every other CTest test (unit, collectives,
#      CLI end to end, every bad input); each test runs once, in one of the two builds (the
#      collectives' matrix and stress tests in step 6's, under TSan); any report fails the test
#      that caused it. The tile model's own unit tests (bf16_gemm_test,
#      amx_test) run here.
#      Under ASan the activation buffer has poisoned red zones between tensors and every NUMA
#      buffer a poisoned tail (model/transformer.h), so an overrun of one tensor into the next reports
#   5. the fuzzers (tests/fuzz/run.sh on build-asan: the seed corpus and past crashes replayed,
#      then 20 s of libFuzzer per target)
#   6. a ThreadSanitizer build of the lock-free code (collectives, bucket sync, worker pool) and
#      its tests: every group count and thread layout, the random stress runs; with --full (not in CI, for time: most of the libraries compiled again) also
#      multi-group training with comm threads: TSan must report nothing
#   7. the MPI bridge under mpirun -n 2: parity with PyTorch, a mismatched rank, a killed rank,
#      a stopped rank (tests/mpi/mpi_tests.sh)
#   8. the bridge across two hosts (network namespaces, Open MPI over TCP): parity, a killed
#      rank, a stopped rank, a partitioned host (tests/netns/train_tests.sh)
#   9. the multi-socket VM tests: QEMU guests with 2 sockets / 2 NUMA nodes and 2 sockets / 4
#      nodes run the NUMA tests and a short training run whose placement and losses are checked
#  10. a fresh machine: the README's two commands (the quickstart shortened to 60 steps; the
#      test command's install, build and a few of its tests) in a minbase bookworm root made by
#      mmdebstrap, nothing installed by hand (tests/install/fresh_root_test.sh); in the
#      background beside the sanitizer build (step 4), joined before its tests
#  11. packaging: the light .deb (no MPI) installed by apt into a fresh bookworm root made by
#      mmdebstrap, running the quickstart's steps there (tests/install/deb_test.sh); the deploy/
#      image built from the MPI build's .deb (deploy/build_image.sh: Docker if it runs, else
#      mmdebstrap + umoci) and a 2-rank mpirun inside it; in the background from step 4's tests on,
#      joined at the end
# Exits non-zero if any step fails. .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
full=
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--full]   (--full adds what CI leaves out for time: see above)" >&2
     exit 2 ;;
esac
jobs=$(nproc)
start=$(date +%s)
step() { printf '\n==== [%4d s] %s\n' "$(($(date +%s) - start))" "$*"; }

step "install dependencies"
bash scripts/install-deps.sh --test

# One compiler cache for this run's builds (ccache, from --test): the .deb's build (the Release
# flags without MPI) and the fresh root's test build (scripts/build.sh's flags, the same sources,
# a copy of this cache: tests/install/fresh_root_test.sh) compile what the Release build did.
# Objects are reused only for the same compiler, flags and preprocessed sources (ccache's direct
# mode hashes every header it includes); paths under the clone are hashed relative to it.
export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cputrain-numa/ccache}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-6G}
# -Werror is left out of the hash, so that the builds without it (the quickstart's in the fresh
# root) take back the Release build's objects; a warning replayed from the cache would then not
# fail a -Werror build, so the Release build's log is checked for warnings too.
export CCACHE_IGNOREOPTIONS=-Werror
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
ccache --zero-stats >/dev/null

step "format check (clang-format 14)"
bash scripts/check_format.sh

step "build (Release, -Werror)"
mkdir -p build
bash scripts/build.sh 2>&1 | tee build/release-build.log
if grep -n "warning:" build/release-build.log; then echo "the Release build warned (above)"; exit 1; fi

# The suite is split between the two builds, each test run once (README, Tests): the Release
# build runs the product's own code where that is the point: the numerics (parity with PyTorch,
# transformers, peft, TRL and llama.cpp, finite differences: -march code and jemalloc, as shipped),
# the allocator's jemalloc arenas, the benchmarks' harness, the source checks and the tests
# registered only there (the AMX tile model interpreted, bf16 over 1000 steps, mpirun's binding);
# the ASan+UBSan build below runs every other test: the unit, CLI and integration tests, every
# bad input among them.
release_only='^(module_boundaries|function_length|bench_.*|cli_bf16_quickstart|cli_gradient_checkpointing|mpi_binding|fuzz_replay_.*)$|_tile-model$|^(AllocTest|NodesBackingTest|Threads/AllocStressTest|AllocFreeStep|OurKernels/AllocFreeStepKernels)\.|^ChatTemplateBudget\.EmptyLoopBodyCountsEveryIteration$|^HfTokenizer\.AVocabularyOfMillionsOfIds$'
# The collectives' matrix and stress tests (every group count and thread layout: the slowest
# tests under ASan) run under ThreadSanitizer below, the sanitizer their lock-free code needs.
tsan_only='^(GroupsByThreads/CommMatrixTest|Layouts/CommStressTest)\.'
step "Release: numerics tests (ctest -L numerics)"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900 -L numerics
step "Release: the allocator's jemalloc arenas, the benchmarks, source checks, Release-only tests"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900 -LE numerics -R "$release_only"

# OpenBLAS's SSE3 fallback, as on a CPU newer than it (docs/kernels.md): the quickstart's
# training shortened and a bench row, both on auto, must run the fastest kernels they measured.
step "a foreign CPU: OPENBLAS_CORETYPE=Prescott (tests/cli/foreign_cpu_test.sh)"
bash tests/cli/foreign_cpu_test.sh build 200

# Two chains of steps run in the background beside the foreground's CPU-bound ones: the root
# file system tests spend most of their time in apt, dpkg and the network, on one core or none
# (steps 10, 11), so they share the machine with the sanitizer builds and tests instead of
# waiting for them. Each logs to build/<name>.log, printed when it is joined; a failure fails the
# run there. Nothing timed runs beside them (the Release steps and the foreign CPU's bench row
# are done by then). Each chain is its own process group, ended if this script exits early.
declare -A bg_pid=()
trap 'for p in "${bg_pid[@]}"; do kill -- "-$p" 2>/dev/null || true; done' EXIT
bg_start() {  # NAME COMMAND...: runs COMMAND in the background, logging to build/NAME.log
  local name=$1
  shift
  setsid bash -c "$*" >"build/$name.log" 2>&1 &
  bg_pid[$name]=$!
}
bg_join() {  # NAME: waits for NAME, prints its log, fails the run if it failed
  local name=$1 rc=0
  wait "${bg_pid[$name]}" || rc=$?
  unset "bg_pid[$name]"
  sed "s/^/[$name] /" "build/$name.log"
  [ "$rc" = 0 ] || { echo "FAILED: $name (exit $rc; log build/$name.log)"; exit 1; }
}

step "in the background: a fresh machine, the README's commands in a new bookworm root (tests/install/fresh_root_test.sh)"
bg_start fresh-root bash tests/install/fresh_root_test.sh

# Every report is fatal and fails the test that caused it: ASan stops at the first error
# (halt_on_error) and also checks returns of stack memory and static initialization order,
# UBSan stops too (built with -fno-sanitize-recover=undefined; halt_on_error for code built
# otherwise) and prints the stack, LeakSanitizer checks at exit. The options reach the CLI binary
# the end-to-end tests start, and gtest's death-test children. No suppressions.
step "ASan+UBSan build (build-asan, clang)"
# One sanitizer build serves the suite and the fuzzers (tests/fuzz/run.sh takes it as its build):
# clang, with libFuzzer's coverage instrumentation (-DCPUTRAIN_FUZZ=ON: edge counters that only
# the fuzz targets read; one compile of the libraries instead of two). Warnings are the gcc
# Release build's to fail on. Its objects go to a compiler cache of their own: the fresh root
# copies the Release build's while this build runs.
CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DCPUTRAIN_SANITIZE=address \
  -DCPUTRAIN_FUZZ=ON -DCPUTRAIN_BUILD_BENCH=OFF -DCPUTRAIN_NUMERICS_TESTS=OFF >/dev/null
CCACHE_DIR=$CCACHE_DIR-asan cmake --build build-asan -j "$jobs"

step "joining the fresh root"
bg_join fresh-root

step "in the background: packaging, the .deb on a fresh bookworm root and the deploy/ image (tests/install/deb_test.sh, deploy/build_image.sh)"
bg_start packaging "bash tests/install/deb_test.sh build-deb && bash deploy/build_image.sh build"

step "ASan+UBSan: every test the Release steps did not run"
ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -LE numerics \
  -E "$release_only|$tsan_only"

# The seed corpus and every past crash replayed under ASan, then 20 s of fuzzing per target.
step "fuzzers (tests/fuzz/run.sh, in build-asan)"
FUZZ_BUILD_DIR=build-asan FUZZ_SECONDS=${FUZZ_SECONDS:-20} bash tests/fuzz/run.sh

# The lock-free code's own tests here; multi-group training under TSan (train_test, which needs
# most of the libraries compiled once more, for TSan) with --full only.
step "ThreadSanitizer: collectives, bucket sync, worker pool${full:+, multi-group training}"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DCPUTRAIN_SANITIZE=thread -DCPUTRAIN_WERROR=ON \
  -DCPUTRAIN_BUILD_BENCH=OFF >/dev/null
CCACHE_DIR=$CCACHE_DIR-asan cmake --build build-tsan -j "$jobs" --target comm_kernels_test \
  comm_collectives_test comm_bucket_test comm_stress_test worker_pool_test ${full:+train_test}
for t in comm_kernels_test comm_collectives_test comm_bucket_test comm_stress_test worker_pool_test; do
  echo "-- $t (TSan)"
  TSAN_OPTIONS="halt_on_error=1 exitcode=66" "build-tsan/tests/$t" --gtest_brief=1
done
if [ -n "$full" ]; then
  echo "-- train_test, 2 and 4 groups with inline and comm-thread sync, a replica each or shared (TSan)"
  TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/tests/train_test --gtest_brief=1 \
    --gtest_filter='Train.TwoGroup*:Fixtures/Parity.*odd_4groups*'
fi

step "MPI bridge tests (tests/mpi)"
bash tests/mpi/mpi_tests.sh build

step "MPI bridge across two hosts (tests/netns)"
bash tests/netns/train_tests.sh build

step "multi-socket VM tests (tests/numa-vm)"
bash tests/numa-vm/vm_tests.sh build

# The benchmarks once, as a smoke test (LevelDB runs db_bench in CI): every suite's --quick run
# and the report drawn from it must finish; no number is asserted (docs/benchmarks.md). PyTorch
# is not run here (--pytorch is left out: it would add its start-up to every CI run).
step "benchmark smoke run (bench all --quick, report)"
build/src/cli/cputrain-numa bench all --quick --json build/bench-quick.json
build/src/cli/cputrain-numa report build/bench-quick.json -o build/bench-report

step "joining the packaging"
bg_join packaging

echo
ccache --show-stats | sed -n '1,6p'
echo "all test steps passed in $(($(date +%s) - start)) s"
