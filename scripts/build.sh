#!/usr/bin/env bash
# Configures and builds cputrain-numa into build/ (Release, warnings as errors, tests included).
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Tests ON explicitly: the quickstart may have configured this tree without them.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCPUTRAIN_WERROR=ON -DCPUTRAIN_BUILD_TESTS=ON "$@" >/dev/null
cmake --build build -j "$(nproc)"
