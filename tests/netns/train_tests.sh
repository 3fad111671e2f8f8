#!/usr/bin/env bash
# The MPI bridge across two hosts for real (two network namespaces over a veth pair, Open MPI over
# TCP, the second host's daemon started by rsh-agent.sh: see README.md), one rank per host:
#   1. parity: 20 steps of the PyTorch reference run (tests/reference/fixtures/odd) within 1e-4,
#      placement.json listing one rank on each host;
#   2. a rank killed mid-run (SIGKILL on host ctn-b): the job ends non-zero;
#   3. a rank stopped mid-run (SIGSTOP on ctn-b): the other's watchdog names it, the job ends;
#   4. a partition (ctn-b's link down): the rank on ctn-a names its silent peer and exits
#      non-zero within ~watchdog + 10 s, even though mpirun itself cannot end the job then;
#   5. SIGTERM to the rank on ctn-b: both ranks stop after the same step, rank 0 saves it, the
#      job ends;
#   6. SIGTERM to mpirun (odls_base_sigkill_timeout 5): the stop step is saved and the job ends
#      within 30 s (~4 x the timeout, docs/multi-node.md).
# Usage: tests/netns/train_tests.sh BUILD_DIR. Root; ~1 minute.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: train_tests.sh BUILD_DIR}" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
bin=$build/src/cli/cputrain-numa
# A build without the bridge (CPUTRAIN_MPI=OFF, or auto with no MPI found) has nothing to test
# here; tests/cli/mpi_build_test.sh checks that such a binary refuses mpirun.
if grep -qx 'CPUTRAIN_HAVE_MPI:INTERNAL=OFF' "$build/CMakeCache.txt"; then
  echo "train_tests.sh: SKIPPED: $build was built without MPI (CPUTRAIN_MPI); configure with -DCPUTRAIN_MPI=ON"
  exit 0
fi
fixture=$src/tests/reference/fixtures/odd
work=$(mktemp -d)
cleanup() {
  pkill -CONT -f -- "$work" 2>/dev/null || true
  pkill -KILL -f -- "$work" 2>/dev/null || true
  ip netns exec ctn-b ip link set ctn0 up 2>/dev/null || true
  "$here/setup.sh" down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; exit 1; }
"$here/setup.sh" up >/dev/null
run() { "$here/run_mpi.sh" --quiet --keep "$@"; }
train=(train --config "$fixture/config.yaml" --progress quiet
       --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin"
       --set "data.val=$fixture/val.bin")

echo "== 1. parity across two hosts (TCP over the veth pair)"
run --timeout 300 -- "$bin" "${train[@]}" --set "train.out_dir=$work/p" 2>"$work/p.log" \
  || { cat "$work/p.log"; fail "the two-host run failed"; }
/usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$work/p/metrics.jsonl" "$fixture/losses.json"
/usr/bin/python3 - "$work/p/placement.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
hosts = sorted(r["host"] for r in p["ranks"])
assert hosts == ["ctn-a", "ctn-b"], hosts
print("placement.json: rank 0 on %s, rank 1 on %s" % (p["ranks"][0]["host"], p["ranks"][1]["host"]))
PY

long=("${train[@]}" --set train.steps=1000000 --set mpi.watchdog_seconds=4 --set "train.out_dir=$work/long")
# The rank process living in host ctn-b's network namespace.
rank_on_b() {
  local b_ns pid
  b_ns=$(ip netns exec ctn-b readlink /proc/self/ns/net)
  for pid in $(pgrep -f -- "^$bin .*train.out_dir=$work/long"); do
    [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$b_ns" ] && { echo "$pid"; return; }
  done
}
rank_on_a() {
  local b=$1 pid
  for pid in $(pgrep -f -- "^$bin .*train.out_dir=$work/long"); do [ "$pid" != "$b" ] && { echo "$pid"; return; }; done
}
start_long() {  # NAME [run_mpi.sh options]
  rm -rf "$work/long"
  run --timeout 120 "${@:2}" -- "$bin" "${long[@]}" >"$work/$1.log" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ -s "$work/long/metrics.jsonl" ] && [ -n "$(rank_on_b)" ] && break; sleep 0.1; done
  sleep 1
  victim=$(rank_on_b)
  [ -n "$victim" ] || { cat "$work/$1.log"; fail "no rank found on ctn-b"; }
}
wait_gone() {  # PID SECONDS: until PID exits; prints the seconds it took
  local t0=$SECONDS
  while kill -0 "$1" 2>/dev/null; do
    [ $((SECONDS - t0)) -lt "$2" ] || return 1
    sleep 0.1
  done
  echo $((SECONDS - t0))
}

echo "== 2. a rank killed mid-run on host ctn-b"
start_long kill
kill -KILL "$victim"
took=$(wait_gone "$job" 30) || fail "the job still ran 30 s after its rank on ctn-b was killed"
set +e; wait "$job"; rc=$?; set -e
[ "$rc" -ne 0 ] || fail "the job exited 0"
echo "killed rank: the job ended with exit code $rc after ~${took} s"

echo "== 3. a rank stopped mid-run on host ctn-b"
start_long stop
kill -STOP "$victim"
took=$(wait_gone "$job" 30) || fail "the job still ran 30 s after its rank on ctn-b stopped"
kill -KILL "$victim" 2>/dev/null || true
set +e; wait "$job"; rc=$?; set -e
[ "$rc" -ne 0 ] || fail "the job exited 0"
grep -q "rank 1 (host ctn-b) has sent no heartbeat" "$work/stop.log" || { cat "$work/stop.log"; fail "no watchdog message naming rank 1"; }
echo "stopped rank: named by the watchdog; the job ended with exit code $rc after ~${took} s"

echo "== 4. host ctn-b cut off (its link down)"
start_long part
survivor=$(rank_on_a "$victim")
ip netns exec ctn-b ip link set ctn0 down
took=$(wait_gone "$survivor" 30) || fail "the rank on ctn-a still ran 30 s after the partition"
grep -q "rank 1 (host ctn-b) has sent no heartbeat" "$work/part.log" || { cat "$work/part.log"; fail "no watchdog message naming rank 1"; }
echo "partition: the rank on ctn-a named rank 1 and exited after ~${took} s"
# mpirun cannot reach ctn-b's daemon any more and would wait for it: end it (README.md).
pkill -KILL -f -- "mpirun.*$work/long" 2>/dev/null || true
set +e; wait "$job"; set -e
# A SIGTERM on one rank (Kubernetes stopping the worker pod on ctn-b), or on mpirun (stopping the
# launcher pod, which forwards it): every rank stops after the same step, rank 0 saves a
# checkpoint, and the job ends. The bound: the step in flight, the save, and MPI's shutdown.
sigterm_case() {  # NAME PID-TO-SIGNAL
  kill -TERM "$2"
  took=$(wait_gone "$job" 30) || { cat "$work/$1.log"; fail "$1: the job still ran 30 s after SIGTERM"; }
  set +e; wait "$job"; rc=$?; set -e
  # The stop step is the last one in metrics.jsonl; it must be the checkpoint `latest` names.
  step=$(tail -1 "$work/long/metrics.jsonl" | grep -o '"step":[0-9]*' | grep -o '[0-9]*$')
  local ckpt
  ckpt=$(printf '%s/long/checkpoints/step_%08d' "$work" "$step")
  [ -s "$ckpt/model.bin" ] && [ -s "$ckpt/state.bin" ] || { cat "$work/$1.log"; fail "$1: no checkpoint at $ckpt"; }
  [ "$(cat "$work/long/latest")" = "checkpoints/$(basename "$ckpt")" ] || fail "$1: out_dir/latest does not name $ckpt"
  echo "$1: stopped after step $step, $(basename "$ckpt") saved; exit $rc after ~${took} s"
}

echo "== 5. SIGTERM to the rank on ctn-b"
start_long term-rank
sigterm_case term-rank "$victim"
# Both ranks say where they stopped (mpirun forwards their output in this case).
[ "$(grep -c "^stopped by .* after step $step;" "$work/term-rank.log")" -eq 2 ] \
  || { cat "$work/term-rank.log"; fail "the two ranks did not both report the stop step"; }

echo "== 6. SIGTERM to mpirun"
# Open MPI 4.1's mpirun, on SIGTERM, sends the ranks SIGCONT, waits odls_base_sigkill_timeout
# seconds, sends SIGTERM, waits as long again, then SIGKILLs (docs/multi-node.md): the ranks
# get the signal only after the first wait, and the second is their time to save.
start_long term-mpirun --mca odls_base_sigkill_timeout 5
sigterm_case term-mpirun "$(pgrep -f -- "^[^ ]*mpirun .*train.out_dir=$work/long" | head -1)"

echo "two-host MPI tests passed"
