#!/usr/bin/env bash
# The peers' Python environment: a venv of Debian's python3 holding the pinned
# scripts/peers-requirements.txt from PyPI (PyTorch 2.x, Intel Extension for PyTorch,
# transformers, peft, safetensors, tokenizers, accelerate, numpy, tiktoken). `bench train
# --pytorch` runs PyTorch from it, and the tests that check our formats and numerics against
# transformers and tiktoken run in it.
#
# It lives outside the clone, so that a fresh clone on the same machine (CI's) reuses it:
#   $CPUTRAIN_PEERS_VENV, else ${XDG_CACHE_HOME:-~/.cache}/cputrain-numa/peers-venv
# and is current when its stamp (.requirements.sha256) is the requirements file's SHA-256: an
# edit of the file rebuilds it; an interrupted build has no stamp and is rebuilt.
#
#   scripts/peers-env.sh             print the environment's python; exit 2 with the fix if it
#                                    is missing or stale
#   scripts/peers-env.sh --install   make it, or keep it when current (install-deps.sh --peers)
#   scripts/peers-env.sh --dir       print where it is (made or not)
#   scripts/peers-env.sh --ipex      exit 0 if intel_extension_for_pytorch imported when it was
#                                    made, else print why not and exit 1
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$here/scripts/peers-requirements.txt"
venv="${CPUTRAIN_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cputrain-numa/peers-venv}"
want=$(sha256sum "$req" | cut -d' ' -f1)
current() { [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" = "$want" ]; }

case "${1:-}" in
  --dir) echo "$venv" ;;
  --ipex)
    current || { echo "peers-env: $venv is missing or stale" >&2; exit 2; }
    [ "$(head -n1 "$venv/.ipex")" = "imports" ] || { cat "$venv/.ipex"; exit 1; } ;;
  "")
    if current; then echo "$venv/bin/python"; exit 0; fi
    echo "peers-env: the peers' environment $venv is missing or older than" \
      "scripts/peers-requirements.txt; run: bash scripts/install-deps.sh --peers" >&2
    exit 2 ;;
  --install)
    if current; then
      echo "peers-env: $venv is current ($(du -sh "$venv" | cut -f1))"
      exit 0
    fi
    t0=$(date +%s)
    echo "peers-env: making $venv from scripts/peers-requirements.txt (PyPI)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    # Debian's interpreter, whatever python3 comes first on PATH (a pyenv's, say).
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --no-input --disable-pip-version-check \
      --no-cache-dir -r "$req"
    "$venv/bin/python" -c "import torch, transformers, peft, safetensors, tokenizers, accelerate, numpy, tiktoken"
    # IPEX is used where it imports on this CPU; why not, when not.
    if err=$("$venv/bin/python" -c "import intel_extension_for_pytorch" 2>&1); then
      echo imports >"$venv/.ipex"
    else
      printf 'does not import here:\n%s\n' "$(tail -n 3 <<<"$err")" >"$venv/.ipex"
    fi
    echo "$want" >"$venv/.requirements.sha256"
    versions=$("$venv/bin/python" - 2>/dev/null <<'PY'
import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in
                ("torch", "intel_extension_for_pytorch", "transformers", "peft", "tokenizers", "tiktoken")))
PY
)
    echo "peers-env: made in $(($(date +%s) - t0)) s, $(du -sh "$venv" | cut -f1): $versions;" \
      "IPEX $(head -n1 "$venv/.ipex")" ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
