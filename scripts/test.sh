#!/usr/bin/env bash
# The README's second command: installs what is missing, builds, and runs the whole test suite.
#   1. Debian packages (scripts/install-deps.sh, idempotent)
#   2. Release build with -Wall -Wextra -Werror, then every CTest test (unit, numerics against
#      the PyTorch fixtures, collectives, CLI end to end)
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

echo
echo "all test steps passed"
