#!/usr/bin/env bash
# A CPU the distribution's OpenBLAS does not know (issue 40): OpenBLAS 0.3.21 falls back to its
# SSE3 "Prescott" kernels on such a CPU (an Emerald Rapids Xeon did: our fp32 at 0.22x PyTorch),
# and OPENBLAS_CORETYPE=Prescott forces the same on any x86 CPU. With it exported, CI's step:
#   1. the quickstart's training, shortened (configs/quickstart.yaml on the Bible as bytes, STEPS
#      steps), with a fresh calibration (its own CPUTRAIN_CACHE_DIR): the checkpoint's state.bin
#      records the kernel auto chose per class and every candidate's measured rate; every class
#      must run a kernel within 1.2x the best that class measured, and OpenBLAS on Prescott must
#      have been measured (it was a candidate, not assumed away); topo must name the fallback and
#      the OPENBLAS_CORETYPE that fixes it;
#   2. a bench row: `bench train --model small --placement 1x<cores> --kernels --check-auto 1.2`,
#      the auto row beside one row per kernel forced for every class: it fails where auto's
#      tokens/s is below the best forced row's / 1.2.
# Prints the choices and both runs' speeds. Skipped (77) without Debian's bible-kjv.
#   bash tests/cli/foreign_cpu_test.sh BUILD_DIR [STEPS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
steps=${2:-200}
command -v bible >/dev/null || { echo "skipped: no bible (apt-get install bible-kjv)"; exit 77; }
export OPENBLAS_CORETYPE=Prescott CPUTRAIN_CACHE_DIR="$tmp/cache"

bible -f Gen1:1-Rev22:21 </dev/null >"$tmp/kjv.txt"
"$bin" prepare-data --tokenizer bytes -o "$tmp/kjv" "$tmp/kjv.txt" >/dev/null 2>&1 \
  || fail "prepare-data"

"$bin" topo >"$tmp/topo.txt" 2>&1 || { cat "$tmp/topo.txt"; fail "topo"; }
grep -q "OpenBLAS runs its Prescott kernels" "$tmp/topo.txt" ||
  { cat "$tmp/topo.txt"; fail "topo does not name OpenBLAS's Prescott fallback"; }
grep -q "OPENBLAS_CORETYPE=" "$tmp/topo.txt" || fail "topo does not name the fix"

start=$SECONDS
"$bin" train --progress quiet --set "data.train=$tmp/kjv/train.bin" \
  --set "data.val=$tmp/kjv/val.bin" --set "train.steps=$steps" --set "train.eval_every=0" \
  --set "train.checkpoint_every=0" --set "train.out_dir=$tmp/run" 2>"$tmp/train.log" ||
  { cat "$tmp/train.log"; fail "the quickstart's training under OPENBLAS_CORETYPE=Prescott"; }
echo "quickstart's training, $steps steps under OPENBLAS_CORETYPE=Prescott: $((SECONDS - start)) s"
grep -A9 'fp32 products: kernels' "$tmp/train.log" | head -10
/usr/bin/python3 - "$tmp/run" <<'PY' || fail "auto ran a kernel slower than 1.2x the best it measured"
import json, os, struct, sys
# `latest` names the newest step directory (docs/formats.md).
with open(os.path.join(sys.argv[1], "latest")) as f:
    step = os.path.join(sys.argv[1], f.read().strip())
if not os.path.isdir(step):
    step = os.path.join(sys.argv[1], "checkpoints", os.path.basename(step))
with open(os.path.join(step, "state.bin"), "rb") as f:
    head = f.read(32)
    assert head[:8] == b"CPTNSTAT", head[:8]
    meta_bytes = struct.unpack("<Q", head[16:24])[0]
    meta = json.loads(f.read(meta_bytes))
kernels = meta.get("kernels", {})
choice = kernels.get("fp32")
assert choice, f"state.bin records no fp32 kernel choice: {kernels}"
assert "Prescott" in kernels["machine"], kernels["machine"]
bad = []
for c in choice["classes"]:
    rates = {t["kernel"]: t["gflops"] for t in c["timings"] if t["gflops"] > 0}
    assert "openblas" in rates, f"{c['class']}: OpenBLAS was not measured: {rates}"
    best = max(rates.values())
    chosen = rates[c["chosen"]]
    print(f"  {c['class']:<13} {c['chosen']:<9} {chosen:7.1f} GFLOP/s, best {best:7.1f}, "
          f"openblas (Prescott) {rates['openblas']:7.1f}")
    if chosen * 1.2 < best:
        bad.append(c["class"])
sys.exit(1 if bad else 0)
PY

cores=$(nproc)
"$bin" bench train --model small --placement "1x$cores" --accum 0 --steps 3 --warmup 1 \
  --check-auto 1.2 >"$tmp/bench.txt" 2>&1 ||
  { cat "$tmp/bench.txt"; fail "bench train --check-auto 1.2 under OPENBLAS_CORETYPE=Prescott"; }
grep -E "auto on|^  1x" "$tmp/bench.txt"
echo "passed: auto ran the fastest kernels it measured under OPENBLAS_CORETYPE=Prescott"
