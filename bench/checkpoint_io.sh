#!/usr/bin/env bash
# Checkpoint save and load throughput for gpt2-124M (124M parameters: model.bin 0.5 GB plus
# state.bin's AdamW moments 1 GB), against the raw sequential write rate of the same disk
# measured by dd in the same run. Trains 4 steps from a random init (a save after each: 1-3 in the
# background from a snapshot, the last one synchronous),
# then resumes for one more step (loading step 4). Prints the CPU, the dd rate, each save's and
# the load's time and MB/s (as the trainer logs them).
# Usage: bench/checkpoint_io.sh BUILD_DIR [OUT_DIR on the disk to measure]
set -euo pipefail
build=$(cd "${1:?usage: checkpoint_io.sh BUILD_DIR [OUT_DIR]}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${2:-$here/out/checkpoint_io}
bin="$build/src/cli/cputrain-numa"
fx="$here/tests/reference/fixtures/odd"  # its tokens (< 300) are valid GPT-2 ids
rm -rf "$out"
mkdir -p "$out"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
echo "disk: $(df -h --output=source,fstype "$out" | tail -1)"
dd if=/dev/zero of="$out/dd.tmp" bs=1M count=1500 conv=fsync 2>&1 | tail -1 | sed 's/^/dd write 1.5 GB + fsync: /'
rm -f "$out/dd.tmp"
common=(--progress lines --set model.init_from= --set model.layers=12 --set model.channels=768
  --set model.heads=12 --set model.vocab_size=50257 --set model.max_seq_len=1024
  --set data.train="$fx/train.bin" --set data.val= --set data.batch_size=1 --set data.seq_len=24
  --set train.out_dir="$out/run" --set train.checkpoint_every=1 --set train.keep_checkpoints=2
  --set optim.schedule=constant)
"$bin" train "${common[@]}" --set train.steps=4 2>&1 | grep -E "saved .* in |saving .*paused|checkpoint snapshot"
"$bin" train "${common[@]}" --set train.steps=5 2>&1 | grep -E "loaded .* in |saved .* in |saving .*paused"
du -sh "$out/run/checkpoints/"* | sed 's/^/size: /'
rm -rf "$out"
