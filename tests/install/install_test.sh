#!/usr/bin/env bash
# `cmake --install` end to end: an installed cputrain-numa needs nothing from the clone.
#   1. install the build into a temporary prefix, then move the prefix elsewhere (the binary
#      must find its files relative to itself, not where it was installed);
#   2. in a private mount namespace, hide the source tree's vocabulary (an empty tmpfs over
#      third_party/): the build-tree binary's `--tokenizer gpt2` now fails (exit 2) — the proof
#      that the hiding works — and the installed one still tokenizes, byte for byte as the
#      build-tree binary did before the hiding;
#   3. the installed configs are the repository's, and the installed binary accepts them.
# Usage: tests/install/install_test.sh BUILD_DIR. Exit 77 (skipped) without the vocabulary
# (scripts/install-deps.sh --gpt2-vocab) or where unshare/mount are not permitted.
set -euo pipefail
build=$(cd "${1:?usage: install_test.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
vocab=$src/third_party/gpt2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
unset CPUTRAIN_GPT2_VOCAB_DIR
if [ ! -f "$vocab/encoder.json" ]; then
  echo "install_test: SKIPPED: no GPT-2 vocabulary in $vocab (scripts/install-deps.sh --gpt2-vocab)"
  exit 77
fi
if ! unshare -m true 2>/dev/null; then
  echo "install_test: SKIPPED: unshare -m is not permitted here (needs root or user namespaces)"
  exit 77
fi

cmake --install "$build" --prefix "$work/installed" >/dev/null
mv "$work/installed" "$work/moved"
bin=$work/moved/bin/cputrain-numa
share=$work/moved/share/cputrain-numa
[ -x "$bin" ] || fail "no bin/cputrain-numa in the prefix"
for f in encoder.json vocab.bpe; do cmp -s "$vocab/$f" "$share/gpt2/$f" || fail "gpt2/$f not installed"; done
for c in "$src"/configs/*.yaml; do
  cmp -s "$c" "$share/configs/$(basename "$c")" || fail "configs/$(basename "$c") not installed"
  "$bin" config --config "$c" >/dev/null || fail "the installed binary rejects configs/$(basename "$c")"
done

# Text with words and punctuation the BPE merges, repeated so both splits hold tokens.
for i in $(seq 1 40); do echo "In the beginning, line $i: the installed vocabulary's tokens."; done \
  >"$work/corpus.txt"
"$build/src/cli/cputrain-numa" prepare-data --tokenizer gpt2 -o "$work/ref" "$work/corpus.txt" \
  >/dev/null

# Inside the namespace: third_party/ is an empty tmpfs; nothing outside is changed.
unshare -m bash -s -- "$src" "$build" "$bin" "$work" <<'INNER' || fail "inside the namespace (above)"
set -euo pipefail
src=$1 build=$2 bin=$3 work=$4
mount --make-rprivate /
mount -t tmpfs none "$src/third_party"
set +e
"$build/src/cli/cputrain-numa" prepare-data --tokenizer gpt2 -o "$work/hidden" "$work/corpus.txt" \
  >"$work/hidden.log" 2>&1
rc=$?
set -e
if [ "$rc" != 2 ]; then
  echo "the build-tree binary still found a vocabulary (exit $rc): the hiding failed"; exit 1
fi
"$bin" prepare-data --tokenizer gpt2 -o "$work/inst" "$work/corpus.txt" >/dev/null
INNER
for f in train.bin val.bin; do
  cmp -s "$work/ref/$f" "$work/inst/$f" || fail "the installed binary's $f differs from the build tree's"
done
echo "install_test: the installed binary (prefix moved, source vocabulary hidden) tokenized as the build tree's"
