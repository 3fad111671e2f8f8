#!/usr/bin/env bash
# The README's first command: installs what is missing, builds cputrain-numa, and runs the main
# job on the built-in default (configs/quickstart.yaml):
#   1. the corpus: the King James Bible from Debian's bible-kjv (public domain), tokenized to
#      bytes into data/kjv/{train,val}.bin by `cputrain-numa prepare-data`
#   2. `cputrain-numa train` with no --config: a small byte-level GPT-2 on every core, with the
#      falling training and validation loss on screen (out/quickstart/metrics.jsonl)
#   3. the loss curve (out/quickstart/loss.svg) and a generated sample.
# Usage: scripts/quickstart.sh [--steps N]   (N training steps instead of the config's 1600: a
# shorter run, as CI's fresh-root test makes; the output directory is then out/quickstart-N so
# that it never resumes from, or overwrites, a full run's checkpoints)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
train_args=() out=out/quickstart
case "${1:-}" in
  "") ;;
  --steps)
    [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "quickstart: --steps needs a positive number" >&2; exit 2; }
    out=out/quickstart-$2
    train_args=(--set "train.steps=$2" --set "train.out_dir=$out") ;;
  *) echo "quickstart: unknown option '$1' (usage: scripts/quickstart.sh [--steps N])" >&2; exit 2 ;;
esac

bash scripts/install-deps.sh --build --runtime
# No test suite: its GoogleTest and PyTorch are not installed for the quickstart.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCPUTRAIN_BUILD_TESTS=OFF >/dev/null
cmake --build build --target cputrain-numa -j "$(nproc)"
bin=./build/src/cli/cputrain-numa

if [ ! -f data/kjv/train.bin ] || [ ! -f data/kjv/val.bin ]; then
  mkdir -p data/kjv
  bible -f Gen1:1-Rev22:21 </dev/null >data/kjv/kjv.txt.tmp
  mv data/kjv/kjv.txt.tmp data/kjv/kjv.txt
  "$bin" prepare-data --tokenizer bytes --overwrite -o data/kjv data/kjv/kjv.txt
fi

"$bin" topo
"$bin" train ${train_args[@]+"${train_args[@]}"}
"$bin" plot "$out/metrics.jsonl" -o "$out/loss.svg"
echo
echo "---- a sample from the trained model (cputrain-numa generate):"
"$bin" generate --checkpoint "$out" --tokenizer bytes \
  --prompt "And God said" --tokens 400 --temperature 0.8 --top-k 40 --seed 7
