#!/usr/bin/env bash
# The CLI's rough edges of issue 15, each as a new user met it:
#   1. `cputrain-numa trian` said "A subcommand is required": now "unknown command 'trian'; did
#      you mean 'train'?", exit 2;
#   2. hints pointed at the top-level --help: now the failing subcommand's (`train --help`,
#      `bench gemm --help`);
#   3. defaults were not shown in --help: every subcommand's options show theirs, and
#      --log-level is on each;
#   4. log lines had no time and no level: "[   0.1s] note: ...", --log-level and CPUTRAIN_LOG;
#   5. OMP_NUM_THREADS above the cores was a hard error: a warning with the plan; "4,2" is 4;
#   6. Ctrl-C/SIGTERM reported as errors: prepare-data says "stopped by SIGINT" (exit 130);
#      generate and bench end by the signal with no "error:" line.
# Usage: tests/cli/rough_edges_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
unset OMP_NUM_THREADS CPUTRAIN_LOG
synth=(--topology "synthetic:pack:1 core:8 pu:1")
run() {  # run ARGS...: sets rc, out, err
  rc=0
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}

echo "== 1. unknown commands"
run trian
[[ $rc -eq 2 ]] || fail "trian: exit $rc"
grep -q "^error: unknown command 'trian'; did you mean 'train'?$" <<<"$err" || fail "trian: $err"
run --log-level warn genrate --checkpoint x
grep -q "did you mean 'generate'?" <<<"$err" || fail "genrate after --log-level: $err"
run zzzzzz
[[ $rc -eq 2 ]] && grep -q "^error: unknown command 'zzzzzz'$" <<<"$err" || fail "zzzzzz: $rc $err"
run
[[ $rc -eq 2 ]] || fail "no command: exit $rc"

echo "== 2. hints name the subcommand's --help"
run train --bogus
[[ $rc -eq 2 ]] && grep -q "^hint: run \`$bin train --help\`$" <<<"$err" || fail "train --bogus: $err"
# The bench suites exist when the benchmarks are built (CPUTRAIN_BUILD_BENCH, off in the
# sanitizer builds).
has_bench=false
"$bin" bench --help | grep -q "^  gemm " && has_bench=true
if $has_bench; then
  run bench gemm --bogus
  grep -q "^hint: run \`$bin bench gemm --help\`$" <<<"$err" || fail "bench gemm --bogus: $err"
fi

echo "== 3. defaults in --help"
check_help() {  # subcommand words..., then "--" and the strings its help must show
  local words=() want
  while [[ $1 != -- ]]; do words+=("$1"); shift; done
  shift
  help=$("$bin" "${words[@]}" --help)
  grep -q -- "--log-level" <<<"$help" || fail "${words[*]} --help: no --log-level"
  grep -q "=\[\]" <<<"$help" && fail "${words[*]} --help shows an empty list default"
  # a "not set" sentinel outside the option's own range (--steps INT in [1 - 100000]=0) is
  # not a default: the text says what happens when the option is left out
  grep -E "in \[1 - [0-9]+\]=(0|-1)\b" <<<"$help" && fail "${words[*]} --help shows a sentinel as a default"
  for want in "$@"; do grep -qF -- "$want" <<<"$help" || fail "${words[*]} --help lacks '$want'"; done
}
check_help train -- "--progress TEXT:{auto,bar,lines,quiet}=auto"
check_help generate -- "=256" "=1337" "--topology TEXT=this"
check_help prepare-data -- "--val-fraction FLOAT=0.05" "--threads INT=0"
check_help plot -- "--output TEXT=loss.svg"
check_help report -- "=bench-report"
check_help topo --
check_help config --
check_help eval --
if $has_bench; then
  for b in train memory collectives; do check_help bench "$b" --; done
fi

echo "== 4. log lines: elapsed time and level"
train=(train --config "$fx/config.yaml" --topology "synthetic:pack:1 core:2 pu:1"
  --set "model.init_from=$fx/model.bin" --set "data.train=$fx/train.bin" --set data.val=
  --set train.steps=6 --set train.checkpoint_every=0)
stamp='^\[ *[0-9]+\.[0-9]s\] '
run "${train[@]}" --set "train.out_dir=$tmp/t1" --progress lines
[[ $rc -eq 0 ]] || fail "train: $err"
grep -qE "${stamp}note: topology 'synthetic:" <<<"$err" || fail "no stamped note: $err"
grep -qE "${stamp}training L=3" <<<"$err" || fail "no stamped start line: $err"
grep -qE "${stamp}step 6/6 \| loss [0-9.]+ \|" <<<"$err" || fail "no stamped progress line: $err"
grep -vqE "$stamp" <<<"$err" && fail "a line without its stamp: $err"
run "${train[@]}" --set "train.out_dir=$tmp/t2" --log-level error --progress quiet
[[ $rc -eq 0 && -z $err ]] || fail "--log-level error still printed: $err"
CPUTRAIN_LOG=warn run "${train[@]}" --set "train.out_dir=$tmp/t3" --progress quiet
[[ $rc -eq 0 && -z $err ]] || fail "CPUTRAIN_LOG=warn printed info: $err"
CPUTRAIN_LOG=warn run "${train[@]}" --set "train.out_dir=$tmp/t4" --progress quiet --log-level info
grep -q "note:" <<<"$err" || fail "--log-level does not override CPUTRAIN_LOG: $err"
CPUTRAIN_LOG=loud run topo
[[ $rc -eq 2 ]] && grep -q "^error: CPUTRAIN_LOG='loud' is not a log level" <<<"$err" || fail "CPUTRAIN_LOG=loud: $rc $err"
run topo --log-level loud
[[ $rc -eq 2 ]] && grep -q "log-level: loud not in" <<<"$err" || fail "--log-level loud: $rc $err"

echo "== 5. OMP_NUM_THREADS"
threads() { /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["groups"][0]["threads"])' <<<"$out"; }
OMP_NUM_THREADS=4,2 run topo --json "${synth[@]}"
[[ $rc -eq 0 && $(threads) -eq 4 ]] || fail "OMP_NUM_THREADS=4,2: $rc $err"
OMP_NUM_THREADS=64 run topo --json "${synth[@]}"
[[ $rc -eq 0 && $(threads) -eq 8 ]] || fail "OMP_NUM_THREADS=64: exit $rc: $err"
grep -q "warning: OMP_NUM_THREADS=64 asks for more worker threads than package 0 has usable cores (8): group 0 runs 8 on CPUs 0-7" <<<"$err" \
  || fail "OMP_NUM_THREADS=64: no warning with the plan: $err"

echo "== 6. signals are not errors"
# Random text: the GPT-2 tokenizer's cache does not help, so tokenizing takes seconds.
head -c 30M /dev/urandom | base64 >"$tmp/big.txt"
stop_after() {  # seconds signal name command...: sets rc and err
  local secs=$1 sig=$2 name=$3
  shift 3
  "$@" >/dev/null 2>"$tmp/$name.err" &
  local pid=$!
  sleep "$secs"
  kill -s "$sig" "$pid" 2>/dev/null || fail "$name finished before the signal"
  rc=0; wait "$pid" || rc=$?
  err=$(cat "$tmp/$name.err")
  grep -q "error:" <<<"$err" && fail "$name: SIG$sig reported as an error: $err"
  true
}
if "$bin" prepare-data --tokenizer gpt2 -o "$tmp/probe" "$here/README.md" >/dev/null 2>&1; then
  stop_after 1 INT prepare "$bin" prepare-data --tokenizer gpt2 --threads 1 -o "$tmp/data" "$tmp/big.txt"
  [[ $rc -eq 130 ]] || fail "prepare-data: exit $rc after SIGINT: $err"
  grep -q "^stopped by SIGINT; no train.bin or val.bin was written$" <<<"$err" || fail "prepare-data: $err"
  [[ ! -e $tmp/data/train.bin ]] || fail "prepare-data left a train.bin"
else
  echo "SKIP prepare-data under SIGINT: no GPT-2 vocabulary here (scripts/install-deps.sh)"
fi
stop_after 1 TERM generate "$bin" generate --checkpoint "$fx/model.bin" --tokenizer bytes --tokens 1000000
[[ $rc -eq 143 ]] || fail "generate: exit $rc after SIGTERM: $err"
if $has_bench; then
  stop_after 1 TERM bench "$bin" bench gemm
  [[ $rc -eq 143 ]] || fail "bench: exit $rc after SIGTERM: $err"
fi
echo "CLI rough edges: all fixed"
