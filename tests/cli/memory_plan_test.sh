#!/usr/bin/env bash
# The memory plan (train/memory_plan.h) end to end:
#   1. `plan` from a config.json alone (Llama-3.1-8B's published one, no weights): the parameter
#      count transformers gives (8,030,261,248), the plan's lines; a full fine-tune of it is
#      refused with exit 2 and the fixes on a machine of less than 200 GB;
#   2. `plan --model tiny` fits (exit 0) and prints every node's plan;
#   3. `train` of a model whose activations cannot fit (llama-1b at 64 rows of 1024 positions)
#      exits 2 before it allocates, naming the node and the config keys to change, and leaves
#      no checkpoint; a run that fits prints its plan.
#   bash tests/cli/memory_plan_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
total_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)

mkdir -p "$tmp/llama8b"
cat >"$tmp/llama8b/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
 "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
 "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
 "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
 "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
 "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
 "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
 "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256}
JSON
set +e
"$bin" plan --model_name_or_path "$tmp/llama8b" --per_device_train_batch_size 1 \
  --max_seq_length 512 >"$tmp/full.txt" 2>&1
rc=$?
set -e
cat "$tmp/full.txt"
grep -q "8,030,261,248 parameters" "$tmp/full.txt" || fail "not Llama-3.1-8B's parameter count"
for line in "parameters " "gradients " "optimizer state " "activations " "checkpoint snapshot "; do
  grep -q "^    $line" "$tmp/full.txt" || fail "no '$line' line in the plan"
done
if [ "$total_kb" -lt $((200 * 1024 * 1024)) ]; then
  [ "$rc" = 2 ] || fail "a full fine-tune of 8B parameters was not refused (exit $rc)"
  grep -q "error: the run needs .* on NUMA node" "$tmp/full.txt" || fail "no refusal naming the node"
  grep -q "hint: .*--lora_r" "$tmp/full.txt" || fail "the hint does not name --lora_r"
fi

"$bin" plan --model tiny --per_device_train_batch_size 2 --max_seq_length 64 >"$tmp/tiny.txt" 2>&1 ||
  { cat "$tmp/tiny.txt"; fail "plan --model tiny"; }
grep -q "^fits: every node can hold its plan" "$tmp/tiny.txt" || fail "tiny does not fit?"
grep -q "^  node 0: .* planned, .* available" "$tmp/tiny.txt" || fail "no node line"

# Missing model, both, and a sequence longer than the model's: exit 2 naming the flag.
for args in "" "--model tiny --model_name_or_path $tmp/llama8b" "--model tiny --max_seq_length 100000"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" plan $args >"$tmp/bad.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] || { cat "$tmp/bad.txt"; fail "plan $args: exit $rc, not 2"; }
done

printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..2400} >"$tmp/text.txt"
"$bin" prepare-data --tokenizer bytes -o "$tmp/data" "$tmp/text.txt" >/dev/null 2>&1 || fail "prepare-data"
if [ "$total_kb" -lt $((1024 * 1024 * 1024)) ]; then
  set +e
  "$bin" train --progress quiet --set model.preset=llama-1b --set model.max_seq_len=1024 \
    --set data.seq_len=1024 --set data.batch_size=64 --set "data.train=$tmp/data/train.bin" \
    --set "data.val=$tmp/data/train.bin" --set "train.out_dir=$tmp/big" --set train.steps=1 \
    --set optim.warmup_steps=0 \
    >"$tmp/big.txt" 2>&1
  rc=$?
  set -e
  cat "$tmp/big.txt"
  [ "$rc" = 2 ] || fail "train of a run that cannot fit: exit $rc, not 2"
  grep -q "error: the run needs .* on NUMA node 0" "$tmp/big.txt" || fail "no refusal naming node 0"
  grep -q "hint: lower data.batch_size or data.seq_len" "$tmp/big.txt" || fail "no config keys in the hint"
  [ ! -d "$tmp/big/checkpoints" ] || fail "a refused run left checkpoints"
fi
"$bin" train --progress quiet --config "$fx/config.yaml" --set "model.init_from=$fx/model.bin" \
  --set "data.train=$fx/train.bin" --set "data.val=$fx/val.bin" --set "train.out_dir=$tmp/small" \
  --set train.steps=6 >"$tmp/small.txt" 2>&1 || { cat "$tmp/small.txt"; fail "a small run"; }
grep -q "memory plan, per NUMA node" "$tmp/small.txt" || fail "train does not print its plan"
echo "ok"
