#!/usr/bin/env bash
# `bench train` on a Llama, both sides (smoke; no number is asserted): a 2-layer grouped-query
# Llama (`--model config`) for one timed step on placements 1x1 and 2x1, and transformers'
# LlamaForCausalLM from the same config.json (eager setup only: compile would take minutes).
# Checks the JSON records: our rows ran in their own process and report peak_rss_bytes and the
# memory guard's estimate; the PyTorch row trained a "llama" with sdpa attention and reports its
# peak RSS; the summary has both ratios.
#   bash tests/cli/bench_train_llama_test.sh BUILD_DIR PEERS_PYTHON
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
python=${2:?usage: bench_train_llama_test.sh BUILD_DIR PEERS_PYTHON}

"$bin" bench --help | grep -q "^  train " || { echo "skipped: benchmarks not built"; exit 77; }
"$bin" bench train --quick --model config --set model.arch=llama --set model.layers=2 \
  --set model.channels=64 --set model.heads=4 --set model.kv_heads=2 --set model.ffn_hidden=160 \
  --set model.vocab_size=512 --set model.max_seq_len=32 --set data.batch_size=2 \
  --set data.seq_len=32 --placement 1x1 --placement 2x1 --accum 0 --steps 1 --warmup 1 \
  --pytorch --python "$python" --pytorch-setup eager --json "$tmp/train.json" \
  >"$tmp/out.txt" 2>"$tmp/err.txt" || { cat "$tmp/out.txt" "$tmp/err.txt"; fail "bench train"; }
cat "$tmp/out.txt"
grep -q "peak RSS" "$tmp/out.txt" || fail "no peak RSS column"
/usr/bin/python3 - "$tmp/train.json" <<'PY' || fail "records"
import json, sys
recs = json.load(open(sys.argv[1]))
ours = [r for r in recs if r.get("impl") == "cputrain"]
torch = [r for r in recs if r.get("impl") == "pytorch"]
assert len(ours) == 2 and all("tokens_per_s" in r for r in ours), ours
for r in ours:
    assert r["peak_rss_bytes"] > 0 and r["mem_estimate_bytes"] > 0, r
assert len(torch) == 1 and "tokens_per_s" in torch[0], torch
t = torch[0]
assert t["model_type"] == "llama" and t["attn_implementation"] == "sdpa", t
assert t["peak_rss_bytes"] > 0 and t["flops_per_token"] == ours[0]["flops_per_token"], t
s = [r for r in recs if r.get("kind") == "summary"][0]
assert s["target"] == 1.5 and s["rss_ratio_vs_pytorch_best"] > 0, s
PY
echo "ok"
