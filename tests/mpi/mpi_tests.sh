#!/usr/bin/env bash
# The MPI bridge end to end on this machine (mpirun -n 2, shared memory between the ranks):
#   1. parity with the PyTorch reference (tests/reference/fixtures/odd), 20 steps within 1e-4:
#      1 group per rank, 2 groups per rank (simulated topology) with inline sync, and with comm
#      threads and small buckets — the last two must give bit-identical metrics; gradient
#      accumulation (fixture accum: 3 micro-batches a step) within 1e-4 on 2 ranks; a shuffled run
#      reads the same windows on 2 ranks as on 1 process of 2 groups (within 1e-5, while shuffled
#      and unshuffled differ by far more); train.precision: bf16 within 2e-3 of torch.autocast
#      (fixture bf16) on 2 ranks, where the CPU has AVX512_BF16; a Llama (random init) trains
#      the same steps on 2 ranks as on 1 process of 2 groups (within 1e-5); so does `qa train`
#      (a tiny BERT with dropout on, made by tests/data/make_qa_models.py), with the same
#      predictions.json and scores;
#   2. a rank started with a different config: every rank exits 2 naming it; two ranks of one
#      host pinning the same CPUs (mpirun --bind-to none): exit 2 naming them;
#   3. a rank killed mid-run (SIGKILL): the job ends non-zero within 20 s (mpirun notices);
#   4. a rank stopped mid-run (SIGSTOP, so it neither dies nor answers): the others' watchdog
#      (mpi.watchdog_seconds=4) ends the job non-zero within 20 s, naming the silent rank;
#   5. resume: a 2-rank job stopped by SIGTERM and rerun (train.resume: auto) gives the metrics
#      of a job that never stopped, bit for bit; a 1-process checkpoint resumes on 2 ranks
#      within 1e-6 relative on the first step after the resume (the moments re-shard);
#   6. SIGTERM to one rank only, and to mpirun (odls_base_sigkill_timeout 2): both ranks stop
#      after the same step, rank 0 saves it, and the job ends within the bound
#      docs/multi-node.md states (~4 x odls_base_sigkill_timeout for mpirun);
#   7. mpirun's binding (binding_test.sh) and every documented mpirun line, run reduced
#      (doc_mpirun_lines_test.py).
# Usage: tests/mpi/mpi_tests.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: mpi_tests.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$build/src/cli/cputrain-numa
# A build without the bridge (CPUTRAIN_MPI=OFF, or auto with no MPI found) has nothing to test
# here; tests/cli/mpi_build_test.sh checks that such a binary refuses mpirun.
if grep -qx 'CPUTRAIN_HAVE_MPI:INTERNAL=OFF' "$build/CMakeCache.txt"; then
  echo "mpi_tests.sh: SKIPPED: $build was built without MPI (CPUTRAIN_MPI); configure with -DCPUTRAIN_MPI=ON"
  exit 0
fi
fixture=$src/tests/reference/fixtures/odd
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory between the two local ranks; --oversubscribe: this box may have 2 cores only.
mpirun=(mpirun -n 2 --oversubscribe --mca btl self,vader)
work=$(mktemp -d)
trap 'pkill -CONT -f "$work" 2>/dev/null || true; pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
train_args() {  # out_dir, extra --set ...
  local out=$1; shift
  echo train --config "$fixture/config.yaml" --progress quiet \
    --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
    --set "data.val=$fixture/val.bin" --set "train.out_dir=$out" "$@"
}
strip_timings() {
  /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    for k in ("ms", "tokens_per_s", "forward_ms", "backward_ms", "comm_ms", "optimizer_ms", "time"):
        o.pop(k, None)
    print(json.dumps(o, sort_keys=True))' "$1"
}

echo "== 1. parity, 2 ranks x 1 group"
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/r1") 2>"$work/r1.log" || { cat "$work/r1.log"; fail "2x1 run"; }
/usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$work/r1/metrics.jsonl" "$fixture/losses.json"
/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert len(p["ranks"])==2, p' "$work/r1/placement.json"

echo "== 1b. parity, 2 ranks x 2 groups, inline sync and comm threads"
topo="synthetic:pack:2 numa:1 core:2 pu:1"
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/r2" --set placement.threads_per_group=1 --set comm.bucket_mb=0.05) \
  --topology "$topo" 2>"$work/r2.log" || { cat "$work/r2.log"; fail "2x2 inline run"; }
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/r3" --set placement.comm_threads=1 --set comm.bucket_mb=0.05) \
  --topology "$topo" 2>"$work/r3.log" || { cat "$work/r3.log"; fail "2x2 comm-thread run"; }
/usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$work/r2/metrics.jsonl" "$fixture/losses.json"
cmp <(strip_timings "$work/r2/metrics.jsonl") <(strip_timings "$work/r3/metrics.jsonl") \
  || fail "inline and comm-thread sync differ across ranks"
echo "inline and comm-thread runs: bit-identical metrics"

echo "== 1c. gradient accumulation parity (fixture accum), 2 ranks x 1 group"
accum=$src/tests/reference/fixtures/accum
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(fixture=$accum train_args "$work/acc") 2>"$work/acc.log" \
  || { cat "$work/acc.log"; fail "accumulation run"; }
/usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$work/acc/metrics.jsonl" "$accum/losses.json"

echo "== 1e. train.precision: bf16 against torch.autocast (fixture bf16), 2 ranks x 1 group"
if "$bin" topo --json | /usr/bin/python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["precisions"]["bf16"] else 1)'; then
  bf16=$src/tests/reference/fixtures/bf16
  # shellcheck disable=SC2046
  "${mpirun[@]}" "$bin" $(fixture=$bf16 train_args "$work/bf16") 2>"$work/bf16.log" \
    || { cat "$work/bf16.log"; fail "bf16 run"; }
  /usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$work/bf16/metrics.jsonl" "$bf16/losses.json" 2e-3
else
  echo "skipped: this CPU has no native bf16 ($("$bin" topo | grep precisions))"
fi

echo "== 1d. shuffled: the same windows on 2 ranks as on 1 process of 2 groups"
shuffled=(--set data.shuffle=true --set data.seed=11 --set train.eval_every=0)
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/sh2" "${shuffled[@]}") 2>"$work/sh2.log" \
  || { cat "$work/sh2.log"; fail "shuffled 2-rank run"; }
# shellcheck disable=SC2046
"$bin" $(train_args "$work/sh1" "${shuffled[@]}") --topology "synthetic:pack:2 numa:1 core:1 pu:1" \
  2>"$work/sh1.log" || { cat "$work/sh1.log"; fail "shuffled 1-process run"; }
# shellcheck disable=SC2046
"$bin" $(train_args "$work/sh0" --set train.eval_every=0) 2>"$work/sh0.log" \
  || { cat "$work/sh0.log"; fail "unshuffled run"; }
/usr/bin/python3 -c '
import json, sys
rows = [[json.loads(l) for l in open(f) if "\"loss\"" in l] for f in sys.argv[1:4]]
assert len(rows[0]) == len(rows[1]) == len(rows[2]) == 20, [len(r) for r in rows]
apart = 0
for a, b, c in zip(*rows):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (a["step"], a["loss"], b["loss"])
    assert a["tokens"] == b["tokens"] and a["epoch"] == b["epoch"], (a, b)
    apart = max(apart, abs(a["loss"] - c["loss"]) / a["loss"])
assert apart > 1e-3, apart
' "$work/sh2/metrics.jsonl" "$work/sh1/metrics.jsonl" "$work/sh0/metrics.jsonl" \
  || fail "a shuffled run read other windows on 2 ranks"
echo "shuffled: 2 ranks and 1 process x 2 groups read the same windows"

# ranks_vs_groups NAME --set ...: 8 steps on 2 ranks against 1 process of 2 groups (on 2 synthetic
# nodes): the same losses (1e-5) and gradient norms (1e-4), and the model learned.
ranks_vs_groups() {
  local name=$1
  shift
  # shellcheck disable=SC2046
  "${mpirun[@]}" "$bin" $(train_args "$work/${name}2" "$@") 2>"$work/${name}2.log" \
    || { cat "$work/${name}2.log"; fail "$name 2-rank run"; }
  # shellcheck disable=SC2046
  "$bin" $(train_args "$work/${name}1" "$@") --topology "synthetic:pack:2 numa:1 core:1 pu:1" \
    2>"$work/${name}1.log" || { cat "$work/${name}1.log"; fail "$name 1-process run"; }
  /usr/bin/python3 -c '
import json, sys
rows = [[json.loads(l) for l in open(f) if "\"loss\"" in l] for f in sys.argv[1:3]]
assert len(rows[0]) == len(rows[1]) == 8, [len(r) for r in rows]
for a, b in zip(*rows):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (a["step"], a["loss"], b["loss"])
    assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-4 * a["grad_norm"], (a["step"], a["grad_norm"], b["grad_norm"])
assert rows[0][-1]["loss"] < rows[0][0]["loss"], "the model did not learn"
' "$work/${name}2/metrics.jsonl" "$work/${name}1/metrics.jsonl" || fail "$name on 2 ranks trained otherwise"
}

echo "== 1f. a Llama (random init: GQA, RoPE, SwiGLU, untied head): 2 ranks = 1 process of 2 groups"
ranks_vs_groups ll --set model.init_from= --set model.arch=llama --set model.kv_heads=1 \
  --set model.ffn_hidden=96 --set model.tied_embeddings=false --set train.steps=8 \
  --set train.eval_every=0
echo "Llama: 2 ranks and 1 process x 2 groups train the same steps"

echo "== 1h. LoRA (GPT-2 fixture, adapters on c_attn, c_proj, c_fc): 2 ranks = 1 process of 2 groups"
ranks_vs_groups lo --set train.lora.r=4 --set train.lora.target_modules=c_attn,c_proj,c_fc \
  --set train.steps=8 --set train.eval_every=0
/usr/bin/python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["ranks"]:
    assert len(r["lora"]["base_copies"]) == 1, r["lora"]
assert len(json.load(open(sys.argv[2]))["lora"]["base_copies"]) == 2
' "$work/lo2/placement.json" "$work/lo1/placement.json" || fail "LoRA base copies"
ls "$work/lo2/$(cat "$work/lo2/latest")/adapter_model.safetensors" >/dev/null || fail "no adapter saved"
echo "LoRA: 2 ranks (a base each) and 1 process x 2 groups on 2 nodes (a base each) train the same steps"

echo "== 1g. qa train (BERT, dropout on): 2 ranks = 1 process of 2 groups; the same predictions"
# The tiny BERT and the SQuAD data of tests/data/make_qa_models.py (transformers, in the peers'
# environment: scripts/peers-env.sh prints its python, or exits 2 naming the fix). 4 features a
# group either way: the same global batch of 8, the same rows, the same dropout masks.
peers_python=$(bash "$src/scripts/peers-env.sh") || fail "the peers' environment is missing"
OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONDONTWRITEBYTECODE=1 "$peers_python" "$src/tests/data/make_qa_models.py" "$work/qam" \
  >"$work/qam.log" 2>&1 || { cat "$work/qam.log"; fail "make_qa_models.py"; }
qa_args() {  # output_dir
  echo qa train --model_name_or_path "$work/qam/bert" --train_file "$work/qam/ref/v1.json" \
    --validation_file "$work/qam/ref/v1.json" --do_train --do_eval --max_eval_samples 20 \
    --max_seq_length 48 --doc_stride 16 --max_train_samples 12 --per_device_train_batch_size 4 \
    --learning_rate 1e-3 --max_steps 8 --seed 7 --progress quiet --output_dir "$1"
}
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(qa_args "$work/qa2") >"$work/qa2.out" 2>"$work/qa2.log" \
  || { cat "$work/qa2.log"; fail "qa train on 2 ranks"; }
# shellcheck disable=SC2046
"$bin" $(qa_args "$work/qa1") --topology "synthetic:pack:2 numa:1 core:1 pu:1" \
  >"$work/qa1.out" 2>"$work/qa1.log" || { cat "$work/qa1.log"; fail "qa train, 1 process x 2 groups"; }
/usr/bin/python3 -c '
import json, sys
rows = [[json.loads(l) for l in open(d + "/metrics.jsonl")] for d in sys.argv[1:3]]
# The training steps; the evaluation after training is a row of eval_* of its own, equal too.
evals = [[r for r in rs if "loss" not in r] for rs in rows]
rows = [[r for r in rs if "loss" in r] for rs in rows]
assert len(rows[0]) == len(rows[1]) == 8, [len(r) for r in rows]
assert len(evals[0]) == len(evals[1]) == 1, evals
for a, b in zip(*rows):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (a["step"], a["loss"], b["loss"])
assert evals[0] == evals[1], evals
assert rows[0][-1]["loss"] < rows[0][0]["loss"], "the BERT did not learn"
p = json.load(open(sys.argv[1] + "/placement.json"))
assert len(p["ranks"]) == 2, p
' "$work/qa2" "$work/qa1" || fail "qa train on 2 ranks trained otherwise"
cmp "$work/qa2/predictions.json" "$work/qa1/predictions.json" || fail "qa train on 2 ranks predicted otherwise"
cmp "$work/qa2.out" "$work/qa1.out" || fail "qa train on 2 ranks scored otherwise"
echo "qa train: 2 ranks and 1 process x 2 groups train the same steps and predict the same answers"

echo "== 2. a rank with a different config"
set +e
# shellcheck disable=SC2046
mpirun -n 1 --oversubscribe --mca btl self,vader "$bin" $(train_args "$work/m") : \
  -n 1 "$bin" $(train_args "$work/m" --set optim.lr=0.5) >"$work/m.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { cat "$work/m.log"; fail "config mismatch exited $rc, expected 2"; }
grep -q "rank(s) 1 run a different configuration than rank 0" "$work/m.log" \
  || { cat "$work/m.log"; fail "config mismatch message"; }
echo "config mismatch: exit 2, rank 1 named"

echo "== 2b. two ranks on one host pinning the same CPUs (mpirun --bind-to none)"
set +e
# shellcheck disable=SC2046
mpirun -n 2 --oversubscribe --mca btl self,vader --bind-to none "$bin" $(train_args "$work/o") >"$work/o.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { cat "$work/o.log"; fail "overlapping pinning exited $rc, expected 2"; }
grep -q "both pin a worker to CPU" "$work/o.log" || { cat "$work/o.log"; fail "overlap message"; }
echo "overlapping pinning: exit 2, $(grep -o 'ranks [0-9]* and [0-9]* on host [^ ]* both pin a worker to CPU [0-9]*' "$work/o.log" | head -1)"

long=(--set train.steps=1000000 --set mpi.watchdog_seconds=4)
start_long() {  # runs the long job in the background; sets job_pid
  # A fresh out_dir: the previous job's metrics.jsonl would pass the "running steps" check below
  # before this job has started.
  rm -rf "$work/long"
  # shellcheck disable=SC2046
  "${mpirun[@]}" "$bin" $(train_args "$work/long") "${long[@]}" >"$work/$1.log" 2>&1 &
  job_pid=$!
  for _ in $(seq 100); do  # wait until both ranks run steps
    [ "$(pgrep -c -f -- "^$bin .*train.out_dir=$work/long")" -ge 2 ] && [ -s "$work/long/metrics.jsonl" ] && break
    sleep 0.2
  done
  sleep 1
}
# The newest rank process (not mpirun, whose command line is the same but starts first).
victim() { pgrep -f -- "^$bin .*train.out_dir=$work/long" | sort -n | tail -1; }
wait_job() {  # seconds allowed; sets rc and took
  local t0=$SECONDS
  for _ in $(seq $(( $1 * 10 ))); do kill -0 "$job_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job_pid" 2>/dev/null; then kill -KILL "$job_pid"; fail "the job was still running after $1 s"; fi
  set +e; wait "$job_pid"; rc=$?; set -e
  took=$(( SECONDS - t0 ))
}

echo "== 3. a rank killed mid-run"
start_long kill
kill -KILL "$(victim)"
wait_job 20
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank was killed"
echo "killed rank: job ended with exit code $rc after ~${took} s"

echo "== 4. a rank stopped mid-run (no heartbeats)"
start_long stop
v=$(victim)
kill -STOP "$v"
wait_job 20
kill -KILL "$v" 2>/dev/null || true
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank stopped"
grep -q "has sent no heartbeat for" "$work/stop.log" || { cat "$work/stop.log"; fail "no watchdog message"; }
grep "has sent no heartbeat" "$work/stop.log" | head -1
echo "stopped rank: job ended with exit code $rc after ~${took} s"
echo "== 5. resume across a SIGTERM, and from 1 process onto 2 ranks"
resume_steps=(--set train.steps=200 --set train.eval_every=50)
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/straight") "${resume_steps[@]}" 2>"$work/straight.log" \
  || { cat "$work/straight.log"; fail "straight 2-rank run"; }
# out_dir, launcher...: starts the job and, after its first step, SIGTERMs its processes (as
# Kubernetes stops every pod of an MPIJob). With no child processes (no mpirun), the job itself.
stop_by_sigterm() {
  local out=$1; shift
  # shellcheck disable=SC2046
  "$@" "$bin" $(train_args "$out") "${resume_steps[@]}" >"$out.log" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.05; done
  local procs
  procs=$(pgrep -P "$pid" || true)
  # shellcheck disable=SC2086
  kill -TERM ${procs:-$pid}
  set +e; wait "$pid"; local rc=$?; set -e
  grep -q "stopped by SIGTERM after step" "$out.log" || { cat "$out.log"; fail "$out: not stopped by SIGTERM (exit $rc)"; }
  grep -o "stopped by SIGTERM after step [0-9]*" "$out.log" | head -1
}
stop_by_sigterm "$work/resumed" "${mpirun[@]}"
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/resumed") "${resume_steps[@]}" 2>"$work/resumed2.log" \
  || { cat "$work/resumed2.log"; fail "resumed 2-rank run"; }
cmp <(strip_timings "$work/straight/metrics.jsonl") <(strip_timings "$work/resumed/metrics.jsonl") \
  || fail "a 2-rank job stopped and resumed differs from one that never stopped"
cmp "$work/straight/checkpoints/step_00000200/model.bin" "$work/resumed/checkpoints/step_00000200/model.bin" \
  || fail "resumed final weights differ"
echo "2 ranks stopped by SIGTERM and resumed: bit-identical metrics and weights"
# shellcheck disable=SC2046
"$bin" $(train_args "$work/one-straight") "${resume_steps[@]}" 2>"$work/one-straight.log" \
  || { cat "$work/one-straight.log"; fail "straight 1-process run"; }
stopped_at=$(stop_by_sigterm "$work/one" env | grep -o "[0-9]*$")
# shellcheck disable=SC2046
"${mpirun[@]}" "$bin" $(train_args "$work/one") "${resume_steps[@]}" 2>"$work/one2.log" \
  || { cat "$work/one2.log"; fail "1-process checkpoint resumed on 2 ranks"; }
# Against the 1-process run that never stopped: steps 1..N bit-identical, step N+1 (on 2 ranks,
# the sums in another order) within 1e-6 relative, the next 9 within 1e-5. The difference grows
# as any two placements' do (seen: 1.9e-6 on a grad_norm 8 steps after N; the reference parity
# tests bound placements to 1e-4 over 20 steps); N is wherever the SIGTERM landed.
/usr/bin/python3 -c '
import json, sys
n = int(sys.argv[3])
rows = [[json.loads(l) for l in open(f)] for f in sys.argv[1:3]]
assert len(rows[0]) == len(rows[1]), (len(rows[0]), len(rows[1]))
for a, b in zip(*rows):
    for k in ("loss", "grad_norm", "val_loss"):
        if k in a and a["step"] <= n:
            assert a[k] == b[k], (a["step"], k, a[k], b[k])
        elif k in a and a["step"] <= n + 10:
            tol = 1e-6 if a["step"] == n + 1 else 1e-5
            assert abs(a[k] - b[k]) <= tol * abs(a[k]), (a["step"], k, a[k], b[k])
' "$work/one-straight/metrics.jsonl" "$work/one/metrics.jsonl" "$stopped_at" \
  || fail "1 process -> 2 ranks differs beyond 1e-6 (step N+1) / 1e-5 (N+2..N+10)"
echo "a 1-process checkpoint resumed on 2 ranks: within 1e-6 relative at N+1, 1e-5 to N+10"
echo "== 6. SIGTERM to one rank, and to mpirun"
# NAME PID-PATTERN [mpirun args]: starts a long job, SIGTERMs the first process whose command
# line matches PATTERN once training runs; the job must end within 20 s with the last step in
# metrics.jsonl saved as the checkpoint `latest` names.
sigterm_one() {
  local name=$1 pattern=$2; shift 2
  local out=$work/$name
  # shellcheck disable=SC2046
  mpirun -n 2 --oversubscribe --mca btl self,vader "$@" "$bin" $(train_args "$out") \
    --set train.steps=1000000 >"$out.log" 2>&1 &
  local job=$! t0
  for _ in $(seq 200); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.05; done
  sleep 0.5
  kill -TERM "$(pgrep -f -- "$pattern.*train.out_dir=$out" | head -1)"
  t0=$SECONDS
  while kill -0 "$job" 2>/dev/null; do
    [ $((SECONDS - t0)) -lt 20 ] || { cat "$out.log"; fail "$name: the job still ran 20 s after SIGTERM"; }
    sleep 0.1
  done
  set +e; wait "$job"; local rc=$?; set -e
  local step
  step=$(tail -1 "$out/metrics.jsonl" | grep -o '"step":[0-9]*' | grep -o '[0-9]*$')
  [ "$(cat "$out/latest" 2>/dev/null)" = "$(printf 'checkpoints/step_%08d' "$step")" ] \
    || { cat "$out.log"; fail "$name: the last step ($step) is not the saved checkpoint"; }
  echo "$name: stopped after step $step, saved; exit $rc after ~$((SECONDS - t0)) s"
}
# One rank only (the first pgrep lists; either rank must do). Both ranks end with 143 on their
# own; mpirun must not abort the job at the first one's exit: once, in CI, the rank that exited
# first lost its "stopped by SIGTERM" line, most likely so (not reproduced in 55 runs). Under
# that setting mpirun itself exits 0 (the case logs it; no exit code is asserted here).
sigterm_one one-rank "^$bin " --mca orte_abort_on_non_zero_status 0
grep -q "^stopped by SIGTERM after step" "$work/one-rank.log" \
  && grep -q "^stopped by a signal on another rank after step" "$work/one-rank.log" \
  || { cat "$work/one-rank.log"; fail "one-rank: the ranks did not report the stop"; }
sigterm_one mpirun "^mpirun " --mca odls_base_sigkill_timeout 2
echo "== 7. binding and the documented mpirun lines"
bash "$src/tests/mpi/binding_test.sh" "$build"
/usr/bin/python3 "$src/tests/mpi/doc_mpirun_lines_test.py" "$build"
echo "MPI bridge tests passed"
