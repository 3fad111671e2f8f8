#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job on the
# built-in default.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/src/cli/cputrain-numa topo
