# Sourced by the CLI test scripts: `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" BUILD_DIR`.
# Sets build (absolute), here (the source tree), bin (the CLI binary), fx (the odd fixture) and
# tmp (a fresh directory, removed at exit: a script that traps EXIT itself removes it too), and
# defines fail MESSAGE (prints it and exits 1).
build=$(cd "${1:?usage: $(basename "$0") BUILD_DIR}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin="$build/src/cli/cputrain-numa"
fx="$here/tests/reference/fixtures/odd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
