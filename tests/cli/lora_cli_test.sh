#!/usr/bin/env bash
# LoRA from the command line, as docs/lora.md shows it, on the odd GPT-2 fixture:
#   1. train.lora on 2 groups writes PEFT adapter step directories and placement.json's lora
#      section (one base copy on this one-node machine, read by both groups);
#   2. `eval --checkpoint BASE --adapter STEP` gives the run's own last validation loss, and the
#      merged export (`export --adapter --merge`) evaluates to the same within 1e-5;
#   3. `generate --adapter` runs; `train --adapter` continues an adapter (its config decides r);
#   4. bad input is exit 2 naming the problem and the fix, with nothing written: a target not in
#      the model, base_dtype bf16 without bf16 products, a missing adapter, a LoRA directory given
#      where whole weights are wanted, train.lora.r contradicting the adapter's; a resume whose
#      checkpoint trained other adapters, or a whole model;
#   5. issue 32: an adapter step directory with one byte flipped in adapter_model.safetensors
#      (state.bin records its CRC32C) was used without a word by eval, generate, train --adapter
#      and export --merge (exit 0, a merged weight of 8.8e34): each is now exit 2 naming the file,
#      and export writes nothing; an adapter without a state.bin holding a NaN is refused by name.
# Usage: tests/cli/lora_cli_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
unset OMP_NUM_THREADS
base=(--config "$fx/config.yaml" --progress quiet --set "model.init_from=$fx/model.bin"
      --set "data.train=$fx/train.bin" --set "data.val=$fx/val.bin" --set optim.weight_decay=0)
run() {  # run ARGS...: sets rc, err
  rc=0
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  err=$(cat "$tmp/err")
}
refused() {  # what-it-is pattern ARGS...: exit 2 and the pattern on stderr
  local what=$1 pattern=$2
  shift 2
  run "$@"
  [[ $rc -eq 2 ]] || fail "$what: exit $rc: $err"
  grep -q -- "$pattern" <<<"$err" || fail "$what: no '$pattern' in: $err"
  grep -q "^hint: " <<<"$err" || fail "$what: no hint in: $err"
}

echo "== 1. a LoRA run on 2 groups"
"$bin" train "${base[@]}" --set "train.out_dir=$tmp/run" --set 'placement.cpus=[[0],[1]]' \
  --set train.lora.r=4 --set train.lora.alpha=8 --set train.lora.target_modules=c_attn,c_proj \
  --set train.checkpoint_every=10 2>"$tmp/train.err" || fail "train: $(cat "$tmp/train.err")"
step=$tmp/run/$(cat "$tmp/run/latest")
for f in adapter_config.json adapter_model.safetensors state.bin; do
  [[ -f $step/$f ]] || fail "the step directory has no $f"
done
[[ ! -e $step/model.bin ]] || fail "a LoRA step directory holds a model.bin"
/usr/bin/python3 - "$tmp/run" <<'PY' || fail "placement.json"
import json, sys
p = json.load(open(sys.argv[1] + "/placement.json"))
lora = p["lora"]
assert len(lora["base_copies"]) == 1, lora["base_copies"]
assert lora["base_copies"][0]["groups"] == [0, 1], lora["base_copies"]
assert lora["target_modules"] == ["c_attn", "c_proj"], lora["target_modules"]
assert lora["trainable_floats"] == 3 * ((4 * 48 + 144 * 4) + (4 * 48 + 48 * 4) + (4 * 192 + 48 * 4)), lora
cfg = json.load(open(sys.argv[1] + "/" + open(sys.argv[1] + "/latest").read().strip() + "/adapter_config.json"))
assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["task_type"] == "CAUSAL_LM", cfg
assert cfg["base_model_name_or_path"].endswith("fixtures/odd/model.bin"), cfg
print("placement.json: one base copy read by groups [0, 1];", lora["describe"])
PY

echo "== 2. eval with the adapter, and of the merged export"
last_val=$(/usr/bin/python3 -c "import json,sys; print([json.loads(l)['val_loss'] for l in open(sys.argv[1]) if 'val_loss' in l][-1])" "$tmp/run/metrics.jsonl")
ev() { "$bin" eval --config "$fx/config.yaml" --data "$fx/val.bin" --batches 2 --json "$@" |
  /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['loss'])"; }
with_adapter=$(ev --checkpoint "$fx/model.bin" --adapter "$step")
"$bin" export --format hf --checkpoint "$fx/model.bin" --adapter "$step" --merge -o "$tmp/merged" >/dev/null
merged=$(ev --checkpoint "$tmp/merged")
without=$(ev --checkpoint "$fx/model.bin")
/usr/bin/python3 - "$last_val" "$with_adapter" "$merged" "$without" <<'PY' || fail "eval"
import sys
last, adapted, merged, base = map(float, sys.argv[1:])
assert abs(adapted - last) <= 1e-6 * abs(last), (adapted, last)
assert abs(merged - adapted) <= 1e-5 * abs(adapted), (merged, adapted)
assert abs(base - adapted) > 1e-3, ("the adapter changed nothing", base, adapted)
print(f"val loss: run {last:.6f}, eval --adapter {adapted:.6f}, merged {merged:.6f}, base {base:.6f}")
PY

echo "== 3. generate with the adapter; continue training the adapter"
"$bin" generate --checkpoint "$fx/model.bin" --adapter "$step" --tokenizer bytes --tokens 8 \
  --temperature 0 >/dev/null || fail "generate --adapter"
"$bin" train "${base[@]}" --set "train.out_dir=$tmp/more" --set train.steps=3 --set optim.warmup_steps=1 \
  --adapter "$step" 2>"$tmp/more.err" || fail "train --adapter: $(cat "$tmp/more.err")"
grep -q "LoRA r=4 alpha=8" "$tmp/more.err" || fail "train --adapter did not take the adapter's r: $(cat "$tmp/more.err")"

echo "== 4. refusals"
refused "unknown target" "LoRA target module 'c_atn' is not in this gpt2 model" \
  train "${base[@]}" --set "train.out_dir=$tmp/bad1" --set train.lora.r=4 --set train.lora.target_modules=c_atn
[[ ! -e $tmp/bad1/checkpoints ]] || fail "a refused run wrote checkpoints"
grep -q "c_attn" <<<"$err" || fail "the refusal does not list the model's modules: $err"
refused "bf16 base in fp32" "base_dtype is bf16 but train.precision is fp32" \
  train "${base[@]}" --set "train.out_dir=$tmp/bad2" --set train.lora.r=4 --set train.lora.base_dtype=bf16
refused "missing adapter" "adapter_config.json" \
  train "${base[@]}" --set "train.out_dir=$tmp/bad3" --adapter "$tmp/nowhere"
refused "adapter as whole weights" "holds a LoRA adapter" \
  eval --config "$fx/config.yaml" --checkpoint "$tmp/run" --data "$fx/val.bin"
refused "r against the adapter's" "the adapter sets its rank" \
  train "${base[@]}" --set "train.out_dir=$tmp/bad4" --adapter "$step" --set train.lora.r=8
refused "a bad rank" "train.lora.r" \
  train "${base[@]}" --set "train.out_dir=$tmp/bad5" --set train.lora.r=-1
# Resuming: the checkpoint decides what trains.
refused "resume with another r" "was trained with LoRA r = 4, this run's 8" \
  train "${base[@]}" --set "train.out_dir=$tmp/run" --set train.steps=30 --set train.lora.r=8 \
  --set train.lora.target_modules=c_attn,c_proj
refused "resume adapters as a full fine-tune" "holds LoRA adapters, but this run trains every weight" \
  train "${base[@]}" --set "train.out_dir=$tmp/run" --set train.steps=30
"$bin" train "${base[@]}" --set "train.out_dir=$tmp/full" --set train.steps=2 \
  --set optim.warmup_steps=1 2>/dev/null || fail "a full fine-tune"
refused "resume a full fine-tune as LoRA" "holds a whole model (a full fine-tune)" \
  train "${base[@]}" --set "train.out_dir=$tmp/full" --set train.steps=4 --set optim.warmup_steps=1 \
  --set train.lora.r=4
echo "== 5. a damaged adapter (issue 32)"
cp -r "$step" "$tmp/damaged"
weights="$tmp/damaged/adapter_model.safetensors"
# The last float's top byte: a lora_B weight of the last layer becomes huge, still finite.
/usr/bin/python3 - "$weights" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-1] ^= 0x10
open(sys.argv[1], "wb").write(b)
PY
damaged="checkpoint '$weights' is damaged: its CRC32C is"
refused "eval --adapter, damaged" "$damaged" \
  eval --config "$fx/config.yaml" --checkpoint "$fx/model.bin" --adapter "$tmp/damaged" --data "$fx/val.bin"
refused "generate --adapter, damaged" "$damaged" \
  generate --checkpoint "$fx/model.bin" --adapter "$tmp/damaged" --tokenizer bytes --tokens 2
refused "train --adapter, damaged" "$damaged" \
  train "${base[@]}" --set "train.out_dir=$tmp/bad6" --set train.steps=2 --set optim.warmup_steps=1 \
  --adapter "$tmp/damaged"
[[ ! -e $tmp/bad6/checkpoints ]] || fail "train --adapter on a damaged adapter wrote checkpoints"
refused "export --merge, damaged" "$damaged" \
  export --format hf --checkpoint "$fx/model.bin" --adapter "$tmp/damaged" --merge -o "$tmp/merged2"
[[ ! -e $tmp/merged2/model.safetensors ]] || fail "export --merge wrote a damaged adapter's merge"
# PEFT's own directory has no state.bin: no checksum, but a weight that is not finite is refused.
mkdir "$tmp/peft_nan"
cp "$step/adapter_config.json" "$step/adapter_model.safetensors" "$tmp/peft_nan/"
/usr/bin/python3 - "$tmp/peft_nan/adapter_model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-4:] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
PY
refused "generate --adapter, NaN" "element [0-9]* is nan" \
  generate --checkpoint "$fx/model.bin" --adapter "$tmp/peft_nan" --tokenizer bytes --tokens 2
echo "LoRA from the command line: ok"
