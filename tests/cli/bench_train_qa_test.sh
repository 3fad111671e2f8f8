#!/usr/bin/env bash
# `bench train` on the task presets, both sides (smoke; no number is asserted), at their real
# widths but 2 rows of 32 positions (--batch 2 --seq-len 32), one timed step each.
# bert-base-qa, the question-answering target: ours on 1x1 and 2x1 (random QA features through
# TrainOptions::train_rows, split over the groups), transformers' BertForQuestionAnswering eager
# (compile would take minutes; DDP's rows, two more Python processes at 110M parameters, are
# tests/cli/bench_train_lora_test.sh's on a small model). Checks what the full run reports: the
# seq/s column and the summary's ratio line in the table; in the JSON records, sequences/s =
# tokens/s / T on every row, each row's peak RSS, the PyTorch side's model (architecture, sdpa
# attention, transformers' parameter count: 108,893,186, the count tests/llama_test.cc pins for
# our preset), the same FLOPs per token on both sides, and the summary's ratio against the target
# 1.5.
# Then the other task presets, one row a side (1x1, eager: each PyTorch row is a new Python
# process, ~10 s of start-up here): distilbert-qa (DistilBertForQuestionAnswering, 66,364,418),
# the classifiers bert-base-cls and smollm2-135m-cls (BertForSequenceClassification,
# LlamaForSequenceClassification: 109,483,778 and 134,516,160) at 2 rows of up to 32 positions,
# the rows lines (each batch padded to its longest), and a ratio line for each.
#   bash tests/cli/bench_train_qa_test.sh BUILD_DIR PEERS_PYTHON
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
python=${2:?usage: bench_train_qa_test.sh BUILD_DIR PEERS_PYTHON}

"$bin" bench --help | grep -q "^  train " || { echo "skipped: benchmarks not built"; exit 77; }
"$python" -c "import torch, transformers" 2>/dev/null ||
  { echo "skipped: $python has no torch and transformers (bash scripts/install-deps.sh --peers)"; exit 77; }
"$bin" bench train --quick --model bert-base-qa --batch 2 --seq-len 32 \
  --placement 1x1 --placement 2x1 --accum 0 --steps 1 --warmup 1 --pytorch --python "$python" \
  --pytorch-setup eager --json "$tmp/train.json" \
  >"$tmp/out.txt" 2>"$tmp/err.txt" || { cat "$tmp/out.txt" "$tmp/err.txt"; fail "bench train"; }
cat "$tmp/out.txt"
grep -q "seq/s .*tokens/s" "$tmp/out.txt" || fail "no seq/s column"
grep -q "random QA features of T=32" "$tmp/out.txt" || fail "no rows line"
[ "$(grep -c "ours / PyTorch's best = .*x (target >= 1.5" "$tmp/out.txt")" = 1 ] ||
  fail "no ratio line"
/usr/bin/python3 - "$tmp/train.json" <<'PY' || fail "records"
import json, sys
recs = json.load(open(sys.argv[1]))
want = {"bert-base-qa": ("BertForQuestionAnswering", "bert", 108893186)}
for model, (arch, model_type, params) in want.items():
    rows = [r for r in recs if r.get("model") == model and "impl" in r]
    ours = [r for r in rows if r["impl"] == "cputrain"]
    torch = [r for r in rows if r["impl"] == "pytorch"]
    assert len(ours) == 2 and len(torch) == 1, rows
    for r in rows:
        assert r["T"] == 32 and r["B"] == 2, r
        assert abs(r["sequences_per_s"] * 32 - r["tokens_per_s"]) < 1e-6 * r["tokens_per_s"], r
        assert r["peak_rss_bytes"] > 0 and r["flops_per_token"] == ours[0]["flops_per_token"], r
    for t in torch:
        assert (t["architecture"], t["model_type"], t["params"]) == (arch, model_type, params), t
        assert t["attn_implementation"] == "sdpa", t
    s = [r for r in recs if r.get("kind") == "summary" and r["model"] == model][0]
    assert s["target"] == 1.5 and s["ratio_vs_pytorch_best"] > 0, s
    assert s["best_sequences_per_s"] > 0 and s["pytorch_best_sequences_per_s"] > 0, s
PY
"$bin" bench train --quick --model distilbert-qa --model bert-base-cls --model smollm2-135m-cls \
  --batch 2 --seq-len 32 --placement 1x1 --accum 0 --steps 1 --warmup 1 --pytorch \
  --python "$python" --pytorch-setup eager --json "$tmp/cls.json" \
  >"$tmp/cls.txt" 2>"$tmp/cls-err.txt" || { cat "$tmp/cls.txt" "$tmp/cls-err.txt"; fail "bench train others"; }
cat "$tmp/cls.txt"
grep -q "random QA features of T=32" "$tmp/cls.txt" || fail "no QA rows line"
grep -q "random classification rows of 8..16 tokens" "$tmp/cls.txt" || fail "no classification rows line"
[ "$(grep -c "ours / PyTorch's best = .*x (target >= 1.5" "$tmp/cls.txt")" = 3 ] ||
  fail "no ratio line for each of the other presets"
/usr/bin/python3 - "$tmp/cls.json" <<'PY' || fail "the other presets' records"
import json, sys
recs = json.load(open(sys.argv[1]))
want = {"distilbert-qa": ("DistilBertForQuestionAnswering", 66364418),
        "bert-base-cls": ("BertForSequenceClassification", 109483778),
        "smollm2-135m-cls": ("LlamaForSequenceClassification", 134516160)}
for model, (arch, params) in want.items():
    rows = [r for r in recs if r.get("model") == model and "impl" in r]
    assert len([r for r in rows if r["impl"] == "cputrain"]) == 1, rows
    torch = [r for r in rows if r["impl"] == "pytorch"]
    assert len(torch) == 1, rows
    for t in torch:
        assert (t["architecture"], t["params"]) == (arch, params), t
PY
echo "ok"
