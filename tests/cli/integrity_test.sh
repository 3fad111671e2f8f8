#!/usr/bin/env bash
# Issue 24, as a user (or a bad disk) met it; each case exited 0 or said the wrong thing before:
#   1. a flipped bit in model.bin's weights or state.bin's moments was resumed from with rc 0:
#      now exit 2 naming the file (CRC32C in state.bin), for train, eval, generate and export;
#      `train --resume-fallback` resumes from the checkpoint before it, saying which and why;
#   2. NaN weights passed generate and export (model.bin and Hugging Face directories): exit 2
#      naming the parameter, its tensor and layer;
#   6. `--set optim=1` said "unknown top-level key 'optim' (did you mean 'optim'?)";
#      `--checkpoint hf/model.safetensors` said "bad magic"; a misspelt option got no
#      did-you-mean; a write that fails for want of room, even when creating the file (no inodes
#      left), is exit 1, one rule with ENOSPC while writing (README, "Errors and exit codes").
# Issue 32 (item 9, 11): the resume hint named --resume-fallback twice; the NaN message counted
# "parameter N" in the layer-major order of memory, not the file's (now: the tensor, and its
# place in the file); `train --set model.init_from=DIR/model.safetensors` hinted `--checkpoint`,
# an option train does not have.
# Usage: tests/cli/integrity_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
unset OMP_NUM_THREADS CPUTRAIN_LOG
run() {  # run ARGS...: sets rc and err (stderr without the log lines)
  rc=0
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  err=$(grep -v "^\[ *[0-9.]*s\] \(note:\|training\|loaded\|saved\)" "$tmp/err" || true)
}
expect() {  # expect RC PATTERN WHAT: the last run exited RC with a stderr line matching PATTERN
  [[ $rc -eq $1 ]] || fail "$3: exit $rc, expected $1: $err"
  grep -q -- "$2" <<<"$err" || fail "$3: no '$2' in: $err"
}
flip() {  # flip FILE OFFSET: xor one byte with 0x10
  python3 -c 'import sys; p, o = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, "rb").read()); b[o] ^= 0x10; open(p, "wb").write(b)' "$1" "$2"
}
size() { stat -c %s "$1"; }
train=(train --config "$fx/config.yaml" --progress quiet --set model.init_from="$fx/model.bin"
  --set data.train="$fx/train.bin" --set data.val= --set train.checkpoint_every=3)

echo "== 1. a flipped bit in a checkpoint"
out="$tmp/run"
run "${train[@]}" --set train.out_dir="$out" --set train.steps=6
[[ $rc -eq 0 ]] || fail "first run: exit $rc: $err"
model="$out/checkpoints/step_00000006/model.bin"
flip "$model" $(( $(size "$model") / 2 ))
run "${train[@]}" --set train.out_dir="$out" --set train.steps=8
expect 2 "^error: cannot resume from $out/checkpoints/step_00000006: checkpoint '$model' is damaged: its CRC32C is" "resume"
expect 2 "^hint: .*train --resume-fallback" "resume hint"
[[ $(grep -o -- "--resume-fallback" <<<"$err" | wc -l) -eq 1 ]] || fail "the hint names --resume-fallback more than once: $err"
run generate --checkpoint "$out" --tokenizer bytes --tokens 1 --prompt a
expect 2 "^error: checkpoint '$model' is damaged" "generate"
run eval --checkpoint "$out" --data "$fx/val.bin" --config "$fx/config.yaml"
expect 2 "^error: checkpoint '$model' is damaged" "eval"
run export --checkpoint "$out" --format hf -o "$tmp/exported"
expect 2 "^error: checkpoint '$model' is damaged" "export"
[[ ! -e "$tmp/exported/model.safetensors" ]] || fail "export wrote the damaged weights"
run "${train[@]}" --set train.out_dir="$out" --set train.steps=8 --resume-fallback
[[ $rc -eq 0 ]] || fail "--resume-fallback: exit $rc: $err"
grep -q "resume: skipping checkpoint $out/checkpoints/step_00000006: checkpoint '$model' is damaged" "$tmp/err" ||
  fail "--resume-fallback does not say what it skipped: $(cat "$tmp/err")"
[[ $(cat "$out/latest") == checkpoints/step_00000008 ]] || fail "latest: $(cat "$out/latest")"
state="$out/checkpoints/step_00000008/state.bin"
flip "$state" $(( $(size "$state") / 2 ))
run "${train[@]}" --set train.out_dir="$out" --set train.steps=10
expect 2 "^error: cannot resume from $out/checkpoints/step_00000008: checkpoint state '$state' is damaged: its CRC32C is" "state.bin"
rm "$state"
run "${train[@]}" --set train.out_dir="$out" --set train.steps=10
expect 2 "is incomplete: it has no state.bin" "missing state.bin"
# llm.c's model.bin, with no state.bin beside it, has no checksum and loads as before.
run generate --checkpoint "$fx/model.bin" --tokenizer bytes --tokens 1 --prompt a
[[ $rc -eq 0 ]] || fail "llm.c's model.bin: exit $rc: $err"

echo "== 2. non-finite weights, through model.bin and a Hugging Face directory"
cp "$fx/model.bin" "$tmp/nan.bin"
python3 -c 'import struct, sys; f = open(sys.argv[1], "r+b"); f.seek(1024 + 4 * 100); f.write(struct.pack("<f", float("nan")))' "$tmp/nan.bin"
run generate --checkpoint "$tmp/nan.bin" --tokenizer bytes --tokens 1 --prompt a
expect 2 "^error: checkpoint '$tmp/nan.bin': tensor wte, element 100 is nan (value 100 of the file" "generate NaN"
expect 2 "^hint: the checkpoint holds a diverged model" "generate NaN hint"
run export --checkpoint "$tmp/nan.bin" --format hf -o "$tmp/nanhf"
expect 2 "tensor wte, element 100 is nan" "export NaN"
# In a tensor of every layer, layer 1: the file's place of the value, not the memory's.
cp "$fx/model.bin" "$tmp/nan1.bin"
at=$(python3 -c 'import struct, sys
h = struct.unpack("<8i", open(sys.argv[1], "rb").read(32))
maxT, V, L, NH, C, Vp = h[2:8]
at = Vp * C + maxT * C + C + 5  # wte, wpe, then ln1w of layer 0, then element 5 of layer 1
f = open(sys.argv[1], "r+b"); f.seek(1024 + 4 * at); f.write(struct.pack("<f", float("nan")))
print(at)' "$tmp/nan1.bin")
run generate --checkpoint "$tmp/nan1.bin" --tokenizer bytes --tokens 1 --prompt a
expect 2 "^error: checkpoint '$tmp/nan1.bin': tensor ln1w, layer 1, element 5 is nan (value $at of the file" "NaN in layer 1"
run export --checkpoint "$fx/model.bin" --format hf -o "$tmp/hf"
[[ $rc -eq 0 ]] || fail "export: exit $rc: $err"
python3 -c 'import struct, sys; f = open(sys.argv[1], "r+b"); f.seek(-4, 2); f.write(struct.pack("<f", float("inf")))' "$tmp/hf/model.safetensors"
run generate --checkpoint "$tmp/hf" --tokenizer bytes --tokens 1 --prompt a
expect 2 "^error: checkpoint '$tmp/hf': tensor '[a-z0-9._]*', element [0-9]* is inf" "generate HF inf"
run export --checkpoint "$tmp/hf" --format llmc -o "$tmp/inf.bin"
expect 2 "is inf" "export HF inf"
[[ ! -e "$tmp/inf.bin" ]] || fail "export wrote the infinite weights"

echo "== 6. messages"
run train --set optim=1
expect 2 "^error: --set optim=1: section 'optim' must be a mapping of keys" "--set optim=1"
! grep -q "did you mean 'optim'" <<<"$err" || fail "--set optim=1: $err"
run generate --checkpoint "$tmp/hf/model.safetensors" --tokenizer bytes --prompt a
expect 2 "^error: checkpoint '$tmp/hf/model.safetensors' is a safetensors file, not a model.bin" "safetensors"
expect 2 "^hint: pass the directory instead: $tmp/hf$" "safetensors hint"
run "${train[@]}" --set train.out_dir="$tmp/init" --set model.init_from="$tmp/hf/model.safetensors"
expect 2 "^error: checkpoint '$tmp/hf/model.safetensors' is a safetensors file" "init_from safetensors"
expect 2 "^hint: pass the directory instead: $tmp/hf$" "init_from safetensors hint"
! grep -q -- "--checkpoint" <<<"$err" || fail "train's hint names --checkpoint, an option train does not have: $err"
run generate --tokns 3 --checkpoint "$fx/model.bin"
expect 2 "^error: unknown option '--tokns' for 'generate'; did you mean '--tokens'?$" "--tokns"
run eval --batchs 3
expect 2 "did you mean '--batches'?" "--batchs before a missing required option"

echo "== 6. a save that cannot create its file for want of room: exit 1, like ENOSPC"
small="$tmp/small"
mkdir "$small"
if ! merr=$(mount -t tmpfs -o size=64m,nr_inodes=12 tmpfs "$small" 2>&1); then
  echo "SKIP (this part): cannot mount a small tmpfs: ${merr:-not permitted}"
  echo "ok"
  exit 0
fi
trap 'umount "$small"; rm -rf "$tmp"' EXIT
run "${train[@]}" --set train.out_dir="$small/run" --set train.steps=9 --set train.keep_checkpoints=0
expect 1 "No space left on device" "no inodes left"
expect 1 "^hint: check free disk space" "no inodes left: hint"
echo "ok: $(grep -m1 "^error:" <<<"$err" | cut -c1-150)"
