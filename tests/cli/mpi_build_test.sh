#!/usr/bin/env bash
# The MPI bridge is optional at build time (CPUTRAIN_MPI). For the build given:
#   with the bridge:    the binary links libmpi;
#   without the bridge: the binary links no libmpi; launched as mpirun launches it (each of
#     OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK in the environment) or with mpi.enabled=on it
#     exits 2 before training, naming the variable and the rebuild (-DCPUTRAIN_MPI=ON); and the
#     same command without them trains (the refusal is not a blanket one).
# Usage: tests/cli/mpi_build_test.sh BUILD_DIR. CTest runs it on the build under test; the .deb
# test (tests/install/deb_test.sh) on its MPI-less build.
set -euo pipefail
build=$(cd "${1:?usage: mpi_build_test.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$build/src/cli/cputrain-numa
fixture=$src/tests/reference/fixtures/odd
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
have=$(sed -n 's/^CPUTRAIN_HAVE_MPI:INTERNAL=//p' "$build/CMakeCache.txt")
libs=$(ldd "$bin")

if [ "$have" = ON ]; then
  grep -q 'libmpi\.so' <<<"$libs" || fail "built with MPI but $bin links no libmpi: $libs"
  echo "mpi_build_test: built with MPI, links $(grep -o 'libmpi\.so[.0-9]*' <<<"$libs" | head -1)"
  exit 0
fi
[ "$have" = OFF ] || fail "CPUTRAIN_HAVE_MPI missing from $build/CMakeCache.txt"
if grep -q 'libmpi\|libopen-pal\|libpmix' <<<"$libs"; then
  fail "built without MPI but $bin links an MPI library: $libs"
fi

run() {  # out_dir, then env assignments; prints the exit status
  local out=$1; shift
  set +e
  env "$@" "$bin" train --config "$fixture/config.yaml" --progress quiet \
    --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
    --set "data.val=$fixture/val.bin" --set "train.out_dir=$work/$out" --set train.steps=6 \
    >"$work/$out.log" 2>&1
  echo $?
  set -e
}
for var in OMPI_COMM_WORLD_SIZE=2 PMI_SIZE=2 PMIX_RANK=0; do
  rc=$(run "refused-${var%%=*}" "$var")
  log=$work/refused-${var%%=*}.log
  [ "$rc" = 2 ] || fail "under $var: exit $rc, wanted 2: $(cat "$log")"
  grep -q "built without MPI" "$log" || fail "under $var: no word of the missing MPI: $(cat "$log")"
  grep -q "${var%%=*}" "$log" || fail "under $var: the variable is not named: $(cat "$log")"
  grep -q -- "-DCPUTRAIN_MPI=ON" "$log" || fail "under $var: the hint lacks the rebuild: $(cat "$log")"
  [ ! -e "$work/refused-${var%%=*}/metrics.jsonl" ] || fail "under $var: it trained before refusing"
done
rc=$(run plain)
[ "$rc" = 0 ] || fail "without mpirun: exit $rc: $(cat "$work/plain.log")"
[ -s "$work/plain/metrics.jsonl" ] || fail "without mpirun: no metrics.jsonl"
echo "mpi_build_test: built without MPI: no libmpi linked; mpirun's environment refused (exit 2)"
