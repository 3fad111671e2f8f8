#!/usr/bin/env bash
# `cputrain-numa train` stopped by a signal, as Kubernetes, Slurm, mpirun or Ctrl-C stop it:
# SIGTERM, SIGINT and SIGHUP each finish the current step, save a checkpoint directory and exit
# with 128 + signal and a line that is not an error, naming the checkpoint and the command that
# resumes the run; running that command continues from the saved step. A second signal ends the
# process at once.
# Usage: tests/cli/stop_signals_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"

# Starts a long run into $tmp/$1 (more train flags after it) in the background; sets $pid once
# a step has been logged.
start_run() {
  local name=$1 out="$tmp/$1"
  shift
  "$bin" train --config "$fx/config.yaml" --progress lines \
    --set model.init_from="$fx/model.bin" --set data.train="$fx/train.bin" --set data.val= \
    --set train.steps=100000 --set train.out_dir="$out" "$@" 2>"$tmp/$name.err" &
  pid=$!
  for _ in $(seq 1 600); do
    [[ -s "$out/metrics.jsonl" ]] && return 0
    kill -0 "$pid" 2>/dev/null || fail "$1: the run ended before its first step: $(cat "$tmp/$1.err")"
    sleep 0.05
  done
  fail "$1: no step logged within 30 s"
}

for sig in TERM INT HUP; do
  start_run "$sig"
  kill -s "$sig" "$pid"
  rc=0; wait "$pid" || rc=$?
  want=$((128 + $(kill -l "$sig")))
  err=$(cat "$tmp/$sig.err")
  [[ $rc -eq $want ]] || fail "SIG$sig: exit $rc, expected $want; stderr: $err"
  grep -q "^stopped by SIG$sig after step [0-9]*; checkpoint $tmp/$sig/checkpoints/step_[0-9]*; resume: $bin train --config" \
    <<<"$err" || fail "SIG$sig: no 'stopped by' line: $err"
  grep -q "^error:" <<<"$err" && fail "SIG$sig: reported as an error: $err"
  steps=$(wc -l <"$tmp/$sig/metrics.jsonl")
  grep -q "after step $steps;" <<<"$err" || fail "SIG$sig: the line names another step than the $steps logged"
  ckpt=$(printf 'checkpoints/step_%08d' "$steps")
  [[ $(cat "$tmp/$sig/latest") == "$ckpt" ]] || fail "SIG$sig: latest is not $ckpt"
  [[ -s "$tmp/$sig/$ckpt/model.bin" && -s "$tmp/$sig/$ckpt/state.bin" ]] || fail "SIG$sig: no checkpoint"
  # The printed command resumes the run (train.resume: auto); ten more steps end it.
  resume=$(sed -n 's/^stopped by .*; resume: //p' <<<"$err")
  eval "$resume --set train.steps=$((steps + 10))" >/dev/null 2>"$tmp/$sig.again.err" ||
    fail "SIG$sig: the resume command failed: $(cat "$tmp/$sig.again.err")"
  [[ $(wc -l <"$tmp/$sig/metrics.jsonl") -eq $((steps + 10)) ]] || fail "SIG$sig: the resumed run did not continue at step $((steps + 1))"
  echo "ok: SIG$sig -> exit $rc after $steps steps, checkpoint saved, the printed command resumed it"
done

# A second signal does not wait for the step or the save: the default action, at once. A model
# big enough that a step takes about a second here, so the second SIGTERM lands inside a step:
# no checkpoint may appear (the first save would come only after that step).
start_run twice --set model.init_from= --set model.vocab_size=50257 --set model.layers=6 \
  --set model.channels=768 --set model.heads=12 --set model.max_seq_len=64
kill -TERM "$pid"; sleep 0.2; kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ $rc -eq 143 ]] || fail "second SIGTERM: exit $rc, expected 143"
[[ ! -e "$tmp/twice/checkpoints" ]] || fail "second SIGTERM: the run still saved a checkpoint"
grep -q "^stopped by" "$tmp/twice.err" && fail "second SIGTERM: the run finished its stop anyway"
echo "ok: a second SIGTERM ends the run at once (exit $rc, nothing saved)"
