#!/usr/bin/env bash
# Before/after in one run: the same training run timed with two builds of cputrain-numa,
# alternating (A B A B ...) so that a drift of the machine (another load, thermal) falls on both.
# Each run is `train` on random token ids (a fresh process, random init, no evaluation or
# checkpoint); its tokens/s is the median of the step rows after the first two. Prints every
# round, the medians and after/before, with the CPU named.
#
#   bench/compare_builds.sh OLD_BINARY NEW_BINARY [ROUNDS] -- [train --set options]
#   bench/compare_builds.sh /tmp/old/build/src/cli/cputrain-numa build/src/cli/cputrain-numa 3 -- \
#       --set model.layers=12 --set model.channels=768 --set model.heads=12 \
#       --set model.vocab_size=50257 --set model.max_seq_len=128 \
#       --set data.batch_size=4 --set data.seq_len=128
#
# Build the old binary from a checkout of the commit before the change:
#   git worktree add /tmp/old COMMIT && cmake -S /tmp/old -B /tmp/old/build \
#       -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/old/build --target cputrain-numa
set -euo pipefail
usage="usage: compare_builds.sh OLD NEW [ROUNDS] -- [train --set options]"
old=${1:?$usage}
new=${2:?$usage}
shift 2
rounds=3
if [[ $# -gt 0 && $1 != -- ]]; then rounds=$1; shift; fi
[[ $# -gt 0 && $1 == -- ]] && shift
for b in "$old" "$new"; do
  [[ -x $b ]] || { echo "compare_builds.sh: $b is not an executable" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 2M random ids below 256 (any model's vocabulary holds them), llm.c's token-file format.
python3 - "$tmp/data.bin" <<'EOF'
import random, struct, sys
n = 1 << 21
rng = random.Random(7)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(rng.randrange(256) for _ in range(n))))
EOF
run=(train --progress quiet --set "data.train=$tmp/data.bin" --set data.val= --set train.steps=12
  --set train.eval_every=0 --set train.checkpoint_every=0 --set optim.schedule=constant "$@")
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') ($(nproc) CPUs)"
echo "before: $old"
echo "after:  $new"
echo "train options: $*"
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    bin=$old
    [[ $side == after ]] && bin=$new
    out="$tmp/$side.$r"
    "$bin" "${run[@]}" --set "train.out_dir=$out" >"$out.log" 2>&1 \
      || { cat "$out.log"; echo "compare_builds.sh: the $side run failed" >&2; exit 1; }
  done
done
python3 - "$tmp" "$rounds" <<'EOF'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def tok_s(side, r):
    rows = [json.loads(l) for l in open(f"{tmp}/{side}.{r}/metrics.jsonl")]
    steps = [x["tokens_per_s"] for x in rows if "tokens_per_s" in x][2:]
    return statistics.median(steps)
res = {s: [tok_s(s, r) for r in range(1, rounds + 1)] for s in ("before", "after")}
for s in ("before", "after"):
    print(f"{s:<6} tok/s per round: " + " ".join(f"{x:.0f}" for x in res[s]) +
          f"  median {statistics.median(res[s]):.0f}")
print(f"after/before: {statistics.median(res['after']) / statistics.median(res['before']):.3f}")
EOF
