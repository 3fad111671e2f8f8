#!/usr/bin/env bash
# Crash safety (issue 12): `cputrain-numa train` killed with SIGKILL at random moments — while it
# trains, writes metrics, or is half-way through a checkpoint (checkpoint_every=1,
# keep_checkpoints=2, so most kills land in a save or a rotation). After every kill:
#   - `latest` names a complete checkpoint directory, and the newest one loads (generate);
#   - metrics.jsonl holds whole lines only;
#   - the rerun (the same command: train.resume=auto) continues from it, never going back, and
#     once it has saved, no temporary of an earlier process survives.
# Before that, a second run into the out_dir of a live one is refused naming its pid. At the end a
# last run finishes the job: every step appears exactly once in metrics.jsonl, in
# order, and no temporary file is left anywhere.
# Usage: tests/cli/crash_resume_test.sh BUILD_DIR [KILLS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
kills=${2:-50}
out="$tmp/run"
fail() { echo "FAIL (kill $i): $*" >&2; exit 1; }
args=(train --config "$fx/config.yaml" --progress quiet --set model.init_from="$fx/model.bin"
  --set data.train="$fx/train.bin" --set data.val= --set train.out_dir="$out"
  --set train.checkpoint_every=1 --set train.keep_checkpoints=2 --set optim.schedule=constant
  --set data.shuffle=true)
latest_step() { [[ -f "$out/latest" ]] && sed 's/.*step_0*//' "$out/latest" || echo 0; }
# Temporaries left by any process other than $1.
stale_temporaries() { { find "$out" -name "*.tmp.*" ! -name "*.tmp.$1" 2>/dev/null || true; } | head -3; }

# One writer per out_dir: a second run into it is refused (exit 2) naming the first one's pid.
i=0
"$bin" "${args[@]}" --set train.steps=1000000 2>"$tmp/err" &
pid=$!
for _ in $(seq 200); do [[ -s "$out/metrics.jsonl" ]] && break; sleep 0.05; done
rc=0
"$bin" "${args[@]}" --set train.steps=1000000 2>"$tmp/err2" || rc=$?
[[ $rc -eq 2 ]] || fail "a second run into a locked out_dir: exit $rc, expected 2"
grep -q "^error: train.out_dir '$out' is in use by another run (pid $pid)" "$tmp/err2" ||
  fail "the refusal does not name pid $pid: $(cat "$tmp/err2")"
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
echo "ok: a second run into a locked out_dir exits 2 naming pid $pid"

RANDOM=${CRASH_SEED:-12}  # a fixed sequence of delays, so a failure can be replayed
prev=$(latest_step)  # the lock test above may have saved already
for i in $(seq 1 "$kills"); do
  "$bin" "${args[@]}" --set train.steps=1000000 2>"$tmp/err" &
  pid=$!
  delay=$(printf '0.%03d' $((20 + RANDOM % 400)))
  sleep "$delay"
  # Once this process has saved a checkpoint, it has cleaned up after the one killed before it.
  if [[ $(latest_step) -gt $prev ]]; then
    stale=$(stale_temporaries "$pid")
    [[ -z "$stale" ]] || fail "temporaries of a dead run survived the restart: $stale"
  fi
  kill -KILL "$pid" 2>/dev/null || fail "the run ended by itself: $(cat "$tmp/err")"
  wait "$pid" 2>/dev/null || true
  step=$(latest_step)
  [[ $step -ge $prev ]] || fail "latest went back from step $prev to $step"
  if [[ $step -gt 0 ]]; then
    dir="$out/$(cat "$out/latest")"
    [[ -s "$dir/model.bin" && -s "$dir/state.bin" ]] || fail "latest names an incomplete $dir"
    "$bin" generate --checkpoint "$out" --tokenizer bytes --tokens 1 --prompt a >/dev/null \
      2>"$tmp/gen" || fail "the newest checkpoint does not load: $(cat "$tmp/gen")"
  fi
  if [[ -s "$out/metrics.jsonl" ]]; then
    [[ $(tail -c1 "$out/metrics.jsonl" | od -An -c | tr -d ' ') == '\n' ]] ||
      fail "metrics.jsonl ends in a torn line"
  fi
  prev=$step
done
echo "ok: $kills SIGKILLs at random moments; the newest checkpoint always loaded (step $prev at the end)"

# Finish the job: two more steps than the newest checkpoint.
final=$((prev + 2))
"$bin" "${args[@]}" --set train.steps=$final 2>"$tmp/err" || fail "the final run failed: $(cat "$tmp/err")"
stale=$(find "$out" -name "*.tmp.*" | head -3)
[[ -z "$stale" ]] || fail "temporaries left after the final run: $stale"
want=$(seq 1 $final | tr '\n' ' ')
got=$(grep -o '"step":[0-9]*' "$out/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')
[[ "$got" == "$want" ]] || fail "metrics.jsonl steps are not 1..$final once each: ${got:0:300}"
left=$(ls "$out/checkpoints" | tr "\n" " ")
[[ $(ls "$out/checkpoints" | wc -l) -eq 2 ]] || fail "keep_checkpoints=2 not kept: $left"
echo "ok: the final run finished at step $final: metrics hold each step once, no temporaries left"
