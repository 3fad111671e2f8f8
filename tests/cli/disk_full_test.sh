#!/usr/bin/env bash
# Disk full during a checkpoint save (issue 12): out_dir on a 2 MB tmpfs holds one checkpoint of
# the odd model (1.3 MB: model.bin and state.bin) but not a second. The run must end with exit 1
# and an error naming the file and the reason (ENOSPC), leave the previous checkpoint intact and
# loadable with `latest` still naming it, and leave no temporary behind.
# Issue 32: a background save that hit the full disk was reported only at the next save
# (checkpoint_every steps later): now the run stops right after it fails; and a full disk while
# appending to metrics.jsonl said "short write" instead of "No space left on device".
# Needs mount(2) (root, or a container allowed to mount): otherwise it is skipped (exit 77) with
# the reason printed.
# Usage: tests/cli/disk_full_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$1"
small="$tmp/small"
mkdir "$small"
if ! err=$(mount -t tmpfs -o size=2m tmpfs "$small" 2>&1); then
  rm -rf "$tmp"
  echo "SKIP: cannot mount a small tmpfs to fill: ${err:-not permitted}"
  exit 77
fi
trap 'umount "$small"; rm -rf "$tmp"' EXIT
out="$small/run"
rc=0
"$bin" train --config "$fx/config.yaml" --progress quiet --set model.init_from="$fx/model.bin" \
  --set data.train="$fx/train.bin" --set data.val= --set train.out_dir="$out" \
  --set train.steps=10 --set train.checkpoint_every=2 --set train.keep_checkpoints=0 \
  2>"$tmp/err" || rc=$?
err=$(grep -v "^\[ *[0-9.]*s\] \(note:\|training\)" "$tmp/err" || true)
[[ $rc -eq 1 ]] || fail "exit $rc, expected 1: $err"
grep -q "^error: writing '$out/checkpoints/step_00000004.tmp.[0-9]*/[a-z]*.bin.tmp.[0-9]*' failed: No space left on device" <<<"$err" ||
  fail "the error does not name the file and ENOSPC: $err"
grep -q "^hint: check free disk space; the previous version of the file is untouched" <<<"$err" || fail "no hint: $err"
[[ $(cat "$out/latest") == checkpoints/step_00000002 ]] || fail "latest moved: $(cat "$out/latest")"
"$bin" generate --checkpoint "$out" --tokenizer bytes --tokens 1 --prompt a >/dev/null 2>"$tmp/gen" ||
  fail "the previous checkpoint does not load: $(cat "$tmp/gen")"
left=$(find "$out" -name "*.tmp.*")
[[ -z "$left" ]] || fail "temporaries left: $left"
echo "ok: disk full during the step-4 save: exit 1, '$(grep -m1 '^error:' <<<"$err" | cut -c1-60)...', step 2 intact and loadable"

# A background save that fails stops the run at once: the step-100 save fails, and the run used
# to go on to step 150, the next save, before saying so.
umount "$small" && mount -t tmpfs -o size=2m tmpfs "$small"
rc=0
"$bin" train --config "$fx/config.yaml" --progress quiet --set model.init_from="$fx/model.bin" \
  --set data.train="$fx/train.bin" --set data.val= --set train.out_dir="$out" \
  --set train.steps=200 --set train.checkpoint_every=50 --set train.keep_checkpoints=0 \
  2>"$tmp/err" || rc=$?
[[ $rc -eq 1 ]] || fail "background save: exit $rc, expected 1: $(cat "$tmp/err")"
grep -q "^error: writing '$out/checkpoints/step_00000100.tmp.*No space left on device" "$tmp/err" ||
  fail "background save: $(cat "$tmp/err")"
last=$(tail -1 "$out/metrics.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["step"])')
((last < 150)) || fail "the failed step-100 save was reported at step $last, the next save"
[[ $(cat "$out/latest") == checkpoints/step_00000050 ]] || fail "latest: $(cat "$out/latest")"
echo "ok: the step-100 background save failed, the run stopped after step $last"

# metrics.jsonl on a full disk: the reason, not "short write".
umount "$small" && mount -t tmpfs -o size=64k tmpfs "$small"
rc=0
"$bin" train --config "$fx/config.yaml" --progress quiet --set model.init_from="$fx/model.bin" \
  --set data.train="$fx/train.bin" --set data.val= --set train.out_dir="$out" \
  --set train.steps=5000 --set train.checkpoint_every=0 2>"$tmp/err" || rc=$?
[[ $rc -eq 1 ]] || fail "metrics: exit $rc, expected 1: $(cat "$tmp/err")"
grep -q "^error: writing '$out/metrics.jsonl' failed: No space left on device" "$tmp/err" ||
  fail "metrics on a full disk: $(cat "$tmp/err")"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$out/metrics.jsonl" ||
  fail "metrics.jsonl holds a torn line"
echo "ok: metrics.jsonl on a full disk after $(wc -l <"$out/metrics.jsonl") rows: No space left on device"
