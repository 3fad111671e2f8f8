#!/usr/bin/env bash
# train.precision: bf16 trains as well as fp32 (issue 14): the quickstart's model, data and
# schedule (configs/quickstart.yaml, the King James Bible as bytes) for 1000 steps in fp32 and in
# bf16, each evaluated on 16 validation windows at the end; the bf16 run's final validation loss
# must be within 1% of the fp32 run's. Prints both. Skipped (77) on a CPU without AVX512_BF16,
# or without Debian's bible-kjv (scripts/install-deps.sh --runtime installs it).
#   bash tests/cli/bf16_quickstart_test.sh BUILD_DIR [STEPS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
steps=${2:-1000}

if ! "$bin" topo --json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["precisions"]["bf16"] else 1)'; then
  echo "skipped: $("$bin" topo 2>/dev/null | grep precisions)"
  exit 77
fi
command -v bible >/dev/null || { echo "skipped: no bible (apt-get install bible-kjv)"; exit 77; }

bible -f Gen1:1-Rev22:21 </dev/null >"$tmp/kjv.txt"
"$bin" prepare-data --tokenizer bytes -o "$tmp/kjv" "$tmp/kjv.txt" >/dev/null 2>&1 \
  || fail "prepare-data"
for p in fp32 bf16; do
  start=$SECONDS
  "$bin" train --config "$here/configs/quickstart.yaml" --progress quiet \
    --set "data.train=$tmp/kjv/train.bin" --set "data.val=$tmp/kjv/val.bin" \
    --set "train.steps=$steps" --set "train.eval_every=0" --set "train.checkpoint_every=0" \
    --set "train.out_dir=$tmp/$p" --set "train.precision=$p" 2>"$tmp/$p.log" \
    || { cat "$tmp/$p.log"; fail "$p run"; }
  echo "$p: $steps steps in $((SECONDS - start)) s"
done
/usr/bin/python3 - "$tmp/fp32/metrics.jsonl" "$tmp/bf16/metrics.jsonl" "$steps" <<'PY'
import json, sys
def last_val(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    vals = [r for r in rows if "val_loss" in r]
    return vals[-1]["step"], vals[-1]["val_loss"], [r["loss"] for r in rows if "loss" in r][-1]
(sf, vf, tf), (sb, vb, tb) = last_val(sys.argv[1]), last_val(sys.argv[2])
steps = int(sys.argv[3])
assert sf == sb == steps, (sf, sb, steps)
rel = abs(vb - vf) / vf
print(f"after {steps} steps: val loss fp32 {vf:.4f}, bf16 {vb:.4f} ({100 * rel:.2f}% apart, bound 1%);"
      f" last train loss fp32 {tf:.4f}, bf16 {tb:.4f}")
sys.exit(0 if rel <= 0.01 else 1)
PY
