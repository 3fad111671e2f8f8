#!/usr/bin/env bash
# mpirun's CPU binding, judged by the trainer (docs/multi-node.md, "Binding"). Issue 15:
# `mpirun -n 1 cputrain-numa train` trained on CPU 0 only (mpirun's default --bind-to core)
# while the header said "auto (all physical cores)".
#   1. mpirun -n 1, default binding: a warning names `--bind-to none`, the plan covers the
#      cpuset, and the running process's own affinity is widened to it;
#   2. mpirun -n 1 --bind-to none: no warning, the same plan;
#   3. mpirun -n 1 --bind-to core (asked for): kept, with a warning; the plan is one CPU;
#   4. mpirun -n 2 (each rank bound to its core): each plans its own core; rank 0 warns about
#      the cpuset's CPUs no rank covers, if any (a box of more than 2 CPUs), else says nothing.
# Needs 2 CPUs in this process's cpuset. Usage: tests/mpi/binding_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: binding_test.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$build/src/cli/cputrain-numa
fixture=$src/tests/reference/fixtures/odd
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_NUM_THREADS OMPI_MCA_hwloc_base_binding_policy
mpirun=(mpirun --mca btl self,vader)
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
ncpus=$(nproc)
[ "$ncpus" -ge 2 ] || { echo "SKIP: needs 2 CPUs, this process has $ncpus"; exit 0; }
# The physical cores of the cpuset, as the planner counts them (one worker per core).
cores=$("$bin" topo --json --set placement.hyperthreads=false | /usr/bin/python3 -c '
import json, sys; print(len(json.load(sys.stdin)["groups"][0]["cpus"]))')
workers() {  # topo JSON on stdin -> total worker count
  /usr/bin/python3 -c 'import json, sys; print(sum(g["threads"] for g in json.load(sys.stdin)["groups"]))'
}

echo "== 1. mpirun -n 1, default binding: widened, with a warning naming --bind-to none"
"${mpirun[@]}" -n 1 "$bin" topo --json >"$work/1.json" 2>"$work/1.err" || { cat "$work/1.err"; fail "topo"; }
grep -q "only rank on this host.*pass \`--bind-to none\` to mpirun" "$work/1.err" \
  || { cat "$work/1.err"; fail "no warning naming --bind-to none"; }
[ "$(workers <"$work/1.json")" -eq "$cores" ] || fail "planned $(workers <"$work/1.json") workers, expected $cores"
train=(train --config "$fixture/config.yaml" --progress quiet --set "model.init_from=$fixture/model.bin"
  --set "data.train=$fixture/train.bin" --set data.val= --set train.steps=100000)
"${mpirun[@]}" -n 1 "$bin" "${train[@]}" --set "train.out_dir=$work/long" 2>"$work/long.err" &
job=$!
for _ in $(seq 600); do [ -s "$work/long/metrics.jsonl" ] && break; sleep 0.05; done
pid=$(pgrep -f -- "^$bin .*train.out_dir=$work/long" | head -1)
[ -n "$pid" ] || { cat "$work/long.err"; fail "the training process is gone"; }
# The main thread (tid = pid) is not a pinned worker: its mask is the process's binding.
allowed=$(awk '/^Cpus_allowed_list/ {print $2}' "/proc/$pid/status")
kill -TERM "$pid"
wait "$job" || true
want=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
[ "$allowed" = "$want" ] || fail "the trainer's affinity is $allowed, expected the cpuset $want"
placed=$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["groups"][0]["cpus"]))' "$work/long/placement.json")
[ "$placed" -eq "$cores" ] || fail "placement.json: $placed workers, expected $cores"
echo "widened: $placed workers, affinity $allowed"

echo "== 2. mpirun -n 1 --bind-to none: no warning, the same plan"
"${mpirun[@]}" -n 1 --bind-to none "$bin" topo --json >"$work/2.json" 2>"$work/2.err" || { cat "$work/2.err"; fail "topo"; }
grep -q "warning" "$work/2.err" && { cat "$work/2.err"; fail "warned with --bind-to none"; }
[ "$(workers <"$work/2.json")" -eq "$cores" ] || fail "--bind-to none planned $(workers <"$work/2.json")"

echo "== 3. mpirun -n 1 --bind-to core: kept as asked, with a warning"
"${mpirun[@]}" -n 1 --bind-to core "$bin" topo --json >"$work/3.json" 2>"$work/3.err" || { cat "$work/3.err"; fail "topo"; }
grep -q "(--bind-to core).*as asked" "$work/3.err" || { cat "$work/3.err"; fail "no warning for --bind-to core"; }
[ "$(workers <"$work/3.json")" -eq 1 ] || fail "--bind-to core planned $(workers <"$work/3.json"), expected 1"

echo "== 4. mpirun -n 2, each rank bound to a core"
"${mpirun[@]}" -n 2 "$bin" "${train[@]}" --set train.steps=6 --set "train.out_dir=$work/two" \
  2>"$work/4.err" || { cat "$work/4.err"; fail "mpirun -n 2"; }
if [ "$cores" -gt 2 ]; then
  grep -q "the bindings of its 2 ranks leave CPU(s) .* unused" "$work/4.err" \
    || { cat "$work/4.err"; fail "no warning about the idle CPUs"; }
else
  grep -q "warning" "$work/4.err" && { cat "$work/4.err"; fail "warned though the ranks cover the cpuset"; }
fi
/usr/bin/python3 -c '
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
cpus = [set(g["cpus"]) for r in ranks for g in r["groups"]]
assert len(cpus) == 2 and not (cpus[0] & cpus[1]) and all(len(c) == 1 for c in cpus), cpus
' "$work/two/placement.json" || fail "ranks should each plan their own core"
echo "MPI binding tests passed"
