#!/usr/bin/env bash
# Fuzzes every input the project parses for a bounded time (docs/fuzzing.md); CI runs it.
#
#   bash tests/fuzz/run.sh [target...]     targets: config checkpoint safetensors token_file topology
#                                            tokenizer tokenizer_json vocab squad adapter hf_shards
#                                            chat_template
#
# 1. configures build-fuzz with clang, ASan+UBSan and libFuzzer (CPUTRAIN_FUZZ=ON) and builds
#    only the fuzz targets and the libraries they link;
# 2. replays each target's committed seed corpus and every past crash (regressions/<target>/);
# 3. fuzzes each target for FUZZ_SECONDS (default 30), FUZZ_JOBS (default 2) targets at a time,
#    from a fresh copy of its seed corpus: 13 targets, 7 rounds of 30 s, about the 3 minutes that 7
#    targets took at 45 s.
# Exits non-zero if any input crashes, leaks, hangs past the per-input timeout or exceeds the
# memory limit, and prints the input and how to keep it as a regression.
#
# Environment: FUZZ_SECONDS, FUZZ_JOBS, FUZZ_BUILD_DIR (default build-fuzz), CC/CXX (default
# clang/clang++; Debian packages clang and libclang-rt-14-dev).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fuzz_dir=$root/tests/fuzz
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-2}
all_targets=(config checkpoint safetensors token_file topology tokenizer tokenizer_json vocab squad
             adapter hf_shards chat_template classify_table)
targets=("${@:-${all_targets[@]}}")

# Longest input per target: enough for every seed (the largest, an hwloc XML, is 7.5 KB; a
# directory of tiny-model shards 4 KB) and small enough that one run stays fast under ASan.
declare -A max_len=([config]=4096 [checkpoint]=4096 [safetensors]=4096 [token_file]=2048 [topology]=12288
                    [tokenizer]=2048 [tokenizer_json]=4096 [vocab]=2048 [squad]=4096 [adapter]=8192
                    [hf_shards]=8192 [chat_template]=4096 [classify_table]=4096)
for t in "${targets[@]}"; do
  [[ -n ${max_len[$t]:-} ]] || { echo "run.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done
# libFuzzer's limits: 10 s for one input is a hang, 2 GiB of RSS (and any single malloc above it)
# is a finding.
flags=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
# Leaks inside hwloc's own XML error paths are hwloc's, not ours: lsan.supp says which and why.
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_C_COMPILER_LAUNCHER=ccache)
echo "== configure $build (clang, ASan+UBSan, libFuzzer)"
mkdir -p "$build"
CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCPUTRAIN_FUZZ=ON -DCPUTRAIN_SANITIZE=address -DCPUTRAIN_BUILD_BENCH=OFF "${launcher[@]}" \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
echo "== build ${targets[*]/#/fuzz_}"
cmake --build "$build" -j"$jobs" --target "${targets[@]/#/fuzz_}"

status=0
crash_help() {  # target, crash file
  echo "run.sh: fuzz_$1 FAILED on $2 ($(stat -c %s "$2") bytes):"
  head -c 256 "$2" | od -A d -c | head -8
  # The whole input, so that a CI log is enough to rebuild it (docs/fuzzing.md).
  echo "  base64 (rebuild it with: base64 -d > FILE):"
  base64 -w 100 "$2" | sed 's/^/    /'
  echo "  reproduce: $build/tests/fuzz/fuzz_$1 $2"
  echo "  keep it:   cp $2 tests/fuzz/regressions/$1/<name-of-the-bug>   (docs/fuzzing.md)"
}

echo "== replay seed corpus and regressions"
for t in "${targets[@]}"; do
  inputs=("$fuzz_dir/corpus/$t"/*)
  [[ -d $fuzz_dir/regressions/$t ]] && inputs+=("$fuzz_dir/regressions/$t"/*)
  if ! "$build/tests/fuzz/fuzz_$t" "${flags[@]}" "${inputs[@]}" >"$build/replay_$t.log" 2>&1; then
    tail -40 "$build/replay_$t.log"
    echo "run.sh: fuzz_$t fails on a committed input (log: $build/replay_$t.log)"
    status=1
  else
    echo "fuzz_$t: ${#inputs[@]} inputs ok"
  fi
done
[[ $status == 0 ]] || exit 1

echo "== fuzz each target for ${seconds}s, $jobs at a time"
work=$build/fuzz-work
rm -rf "$work"
fuzz_one() {  # target
  local t=$1
  mkdir -p "$work/corpus/$t" "$work/crashes/$t"
  cp "$fuzz_dir/corpus/$t"/* "$work/corpus/$t/"
  "$build/tests/fuzz/fuzz_$t" "${flags[@]}" -max_len="${max_len[$t]}" \
    -max_total_time="$seconds" -artifact_prefix="$work/crashes/$t/" "$work/corpus/$t" \
    >"$work/$t.log" 2>&1
}
declare -A pids
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  fuzz_one "$t" &
  pids[$t]=$!
done
for t in "${targets[@]}"; do
  if wait "${pids[$t]}"; then
    echo "fuzz_$t: $(grep -E '^stat::number_of_executed_units' "$work/$t.log" | awk '{print $2}') runs," \
         "corpus $(ls "$work/corpus/$t" | wc -l) inputs, no crash"
  else
    status=1
    grep -E '^==[0-9]+==|SUMMARY|ERROR|broke|broken|terminate|what\(\)' "$work/$t.log" | head -20 || true
    echo "  full log: $work/$t.log"
    for f in "$work/crashes/$t"/*; do [[ -f $f ]] && crash_help "$t" "$f"; done
  fi
done
exit $status
