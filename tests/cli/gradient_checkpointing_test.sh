#!/usr/bin/env bash
# Gradient checkpointing end to end (train.gradient_checkpointing, model/transformer.h):
#   1. `train` of an 8-layer model at T=2048 with and without it: the same losses and gradient
#      norms step by step, the same weights bit for bit;
#   2. the memory it saves, measured: the drop in peak RSS between the two runs is within 10% of
#      the drop the memory plan printed for the activations (the plan's own factor, printed);
#   3. a run resumes with the setting changed (it changes no numerics), and `plan
#      --gradient_checkpointing` plans the smaller activations and names the flag in its fixes.
# Release only (scripts/test.sh): a sanitizer's shadow memory inflates every RSS figure.
#   bash tests/cli/gradient_checkpointing_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"

printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..2400} >"$tmp/text.txt"
"$bin" prepare-data --tokenizer bytes -o "$tmp/data" "$tmp/text.txt" >/dev/null 2>&1 || fail "prepare-data"

# run NAME CHECKPOINTING STEPS: trains into $tmp/NAME/out; its log in $tmp/NAME.txt, its peak RSS
# (KiB, the child's own: getrusage over the one child) in $tmp/NAME.rss.
run() {
  mkdir -p "$tmp/$1"
  python3 - "$tmp/$1.rss" "$bin" train --progress lines --set model.layers=8 \
    --set model.channels=64 --set model.heads=4 --set model.vocab_size=256 \
    --set model.max_seq_len=2048 --set data.seq_len=2048 --set data.batch_size=1 \
    --set "data.train=$tmp/data/train.bin" --set "data.val=$tmp/data/train.bin" \
    --set train.eval_batches=1 --set train.eval_every=0 --set placement.groups=1 \
    --set optim.warmup_steps=0 --set "train.out_dir=$tmp/$1/out" --set "train.steps=$3" \
    --set "train.gradient_checkpointing=$2" >"$tmp/$1.txt" 2>&1 <<'PY' ||
import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)
PY
    { cat "$tmp/$1.txt"; fail "train ($1)"; }
}
run stored false 3
run ckpt true 3

# 1. The same run.
losses() { grep -o '"grad_norm":[^,]*\|"loss":[^,]*' "$1/out/metrics.jsonl"; }
[ "$(losses "$tmp/stored" | wc -l)" -ge 6 ] || fail "no losses in metrics.jsonl"
diff <(losses "$tmp/stored") <(losses "$tmp/ckpt") || fail "the losses or gradient norms differ"
cmp "$tmp/stored/out/checkpoints/step_00000003/model.bin" \
  "$tmp/ckpt/out/checkpoints/step_00000003/model.bin" || fail "the weights differ"
grep -q "gradient checkpointing" "$tmp/ckpt.txt" || fail "the plan does not say it checkpoints"

# 2. The memory: the plan's activations line (MiB) of each run, and the peaks.
planned() { grep -o 'activations  *[0-9.]* MiB' "$1" | grep -o '[0-9.]*'; }
read -r act_stored act_ckpt rss_stored rss_ckpt < <(echo "$(planned "$tmp/stored.txt")" \
  "$(planned "$tmp/ckpt.txt")" "$(cat "$tmp/stored.rss")" "$(cat "$tmp/ckpt.rss")")
python3 - "$act_stored" "$act_ckpt" "$rss_stored" "$rss_ckpt" <<'PY' || fail "memory saving"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
r, s = int(sys.argv[3]) / 1024, int(sys.argv[4]) / 1024
print(f"[measured] activations planned {a:.1f} -> {b:.1f} MiB ({a / b:.2f}x fewer), peak RSS "
      f"{r:.1f} -> {s:.1f} MiB: saved {r - s:.1f} MiB measured, {a - b:.1f} MiB planned "
      f"({(r - s) / (a - b):.3f})")
sys.exit(0 if abs((r - s) / (a - b) - 1) <= 0.10 else 1)
PY

# 3. A resume with the setting changed continues (same numerics either way).
cp -r "$tmp/stored/out" "$tmp/resumed"
"$bin" train --progress quiet --config "$tmp/resumed/config.yaml" \
  --set "train.out_dir=$tmp/resumed" --set train.steps=4 --set train.gradient_checkpointing=true \
  >"$tmp/resume.txt" 2>&1 || { cat "$tmp/resume.txt"; fail "resume with checkpointing"; }
grep -q '"step":4' "$tmp/resumed/metrics.jsonl" || fail "the resumed run did not reach step 4"

"$bin" plan --model tiny --max_seq_length 64 --per_device_train_batch_size 8 >"$tmp/plan0.txt"
"$bin" plan --model tiny --max_seq_length 64 --per_device_train_batch_size 8 \
  --gradient_checkpointing >"$tmp/plan1.txt"
grep -q "gradient checkpointing" "$tmp/plan1.txt" || fail "plan does not say it checkpoints"
[ "$(planned "$tmp/plan1.txt")" != "$(planned "$tmp/plan0.txt")" ] || fail "plan: same activations"
mkdir -p "$tmp/wide"
echo '{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
  "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
  "vocab_size": 128256, "max_position_embeddings": 8192}' >"$tmp/wide/config.json"
# A full fine-tune of an 8B shape (~128 GB of weights, gradients and moments) on a machine of
# less than 100 GB: refused, the fixes naming the flag.
if [ "$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)" -lt $((100 * 1024 * 1024)) ]; then
  set +e
  "$bin" plan --model_name_or_path "$tmp/wide" --per_device_train_batch_size 1 \
    --max_seq_length 2048 >"$tmp/refused.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] || { cat "$tmp/refused.txt"; fail "plan of a run that cannot fit: exit $rc"; }
  grep -q "hint: .*--gradient_checkpointing" "$tmp/refused.txt" || fail "the fixes omit the flag"
fi
echo "ok"
