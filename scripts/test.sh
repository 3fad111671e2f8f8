#!/usr/bin/env bash
# The README's second command: installs what is missing, builds, and runs the whole test suite.
#   1. Debian packages (scripts/install-deps.sh, idempotent)
#   2. Release build with -Wall -Wextra -Werror, then every CTest test (unit, numerics against
#      the PyTorch fixtures, collectives, CLI end to end)
#   3. the multi-socket VM tests: QEMU guests with 2 sockets / 2 NUMA nodes and 2 sockets / 4
#      nodes run the NUMA tests and a short training run whose placement and losses are checked
# Exits non-zero if any step fails. .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=$(nproc)
step() { printf '\n==== %s\n' "$*"; }

step "install dependencies"
bash scripts/install-deps.sh

step "build (Release, -Werror)"
bash scripts/build.sh

step "unit, numerics and integration tests"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900

step "multi-socket VM tests (tests/numa-vm)"
bash tests/numa-vm/vm_tests.sh build

echo
echo "all test steps passed"
