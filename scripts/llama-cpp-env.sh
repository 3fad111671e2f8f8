#!/usr/bin/env bash
# llama.cpp for the GGUF checks (tests/reference/gguf_parity.py, docs/gguf.md): llama-cpp-python
# built from its PyPI source distribution, whose vendored llama.cpp sources also give
# convert_hf_to_gguf.py, its conversion/ modules, gguf-py (the `gguf` package) and the real chat
# templates of models/templates/. The peers' Python (scripts/peers-env.sh) runs them with this
# directory on PYTHONPATH; llama-cpp-python's own Python dependencies are the peers' (numpy,
# jinja2, typing-extensions) plus diskcache, and convert_hf_to_gguf.py's sentencepiece: both
# pinned below, installed here.
#
# It lives outside the clone, so that a fresh clone on the same machine (CI's) reuses it:
#   $CPUTRAIN_LLAMA_CPP_DIR, else ${XDG_CACHE_HOME:-~/.cache}/cputrain-numa/llama-cpp
# and is current when its stamp (.stamp) is the SHA-256 of the pins and build flags below: a
# changed pin rebuilds it (an edit of the comments does not); an interrupted build has no stamp
# and is rebuilt. The build runs 2 jobs (CMake's
# CMAKE_BUILD_PARALLEL_LEVEL) and leaves out what the checks do not use (the multimodal mtmd
# library: LLAVA_BUILD=OFF) and -march=native (GGML_NATIVE=OFF: the cache may outlive the CPU).
#
#   scripts/llama-cpp-env.sh             print the directory to put on PYTHONPATH; exit 2 with
#                                        the fix if it is missing or stale
#   scripts/llama-cpp-env.sh --install   make it, or keep it when current (install-deps.sh
#                                        --test); needs the peers' environment first
#   scripts/llama-cpp-env.sh --dir       print where it is (made or not)
#
# Layout: site/ (llama_cpp, diskcache, sentencepiece; the PYTHONPATH entry), llama.cpp/
# (convert_hf_to_gguf.py, conversion/, gguf-py/, models/templates/ from the sdist), .stamp,
# .build-seconds (how long the wheel took to build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${CPUTRAIN_LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cputrain-numa/llama-cpp}"

# The pins. llama-cpp-python 0.3.36 vendors llama.cpp's sources, gguf-py 0.19.0 among them.
LLAMA_CPP_PYTHON=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
SCIKIT_BUILD_CORE=1.1.2  # its build backend (pip's isolated build environment)
PATHSPEC=1.1.1           # and that backend's dependency
DISKCACHE=5.6.3          # imported by llama_cpp (llama_cache.py)
SENTENCEPIECE=0.2.1      # imported by convert_hf_to_gguf.py's Llama vocabulary path

CMAKE_FLAGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF"
want=$(printf '%s\n' "$LLAMA_CPP_PYTHON" "$LLAMA_CPP_PYTHON_SHA256" "$SCIKIT_BUILD_CORE" "$PATHSPEC" \
  "$DISKCACHE" "$SENTENCEPIECE" "$CMAKE_FLAGS" | sha256sum | cut -d' ' -f1)
current() { [ -d "$dir/site/llama_cpp" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; }

case "${1:-}" in
  --dir) echo "$dir" ;;
  "")
    if current; then echo "$dir/site"; exit 0; fi
    echo "llama-cpp-env: $dir is missing or older than scripts/llama-cpp-env.sh; run:" \
      "bash scripts/install-deps.sh --test (or bash scripts/llama-cpp-env.sh --install)" >&2
    exit 2 ;;
  --install)
    if current; then
      echo "llama-cpp-env: $dir is current ($(du -sh "$dir" | cut -f1))"
      exit 0
    fi
    py=$(bash "$here/scripts/peers-env.sh")  # exits 2 with the fix when it is missing
    t0=$(date +%s)
    echo "llama-cpp-env: building llama-cpp-python $LLAMA_CPP_PYTHON from PyPI's source" \
      "distribution into $dir (2 jobs)"
    rm -rf "$dir"
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pip=("$py" -m pip --no-input --disable-pip-version-check)
    # The build backend pinned wherever pip makes its isolated build environment (the download
    # reads the sdist's metadata through it too).
    printf 'scikit-build-core==%s\npathspec==%s\n' "$SCIKIT_BUILD_CORE" "$PATHSPEC" >"$tmp/build.txt"
    export PIP_CONSTRAINT="$tmp/build.txt"
    "${pip[@]}" download --quiet --no-deps --no-binary llama-cpp-python --dest "$tmp" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON"
    sdist="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
    echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum --check --quiet ||
      { echo "llama-cpp-env: the sdist's SHA-256 is not the pinned one" >&2; exit 1; }
    b0=$(date +%s)
    CMAKE_BUILD_PARALLEL_LEVEL=2 \
      CMAKE_ARGS="$CMAKE_FLAGS" \
      "${pip[@]}" wheel --quiet --no-deps --wheel-dir "$tmp/wheel" "$sdist"
    echo $(($(date +%s) - b0)) >"$tmp/build-seconds"
    unset PIP_CONSTRAINT
    "${pip[@]}" install --quiet --no-deps --no-compile --target "$dir/site" \
      "$tmp"/wheel/llama_cpp_python-*.whl "diskcache==$DISKCACHE" "sentencepiece==$SENTENCEPIECE"
    tar -xzf "$sdist" -C "$tmp"
    src="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
    mkdir -p "$dir/llama.cpp/models"
    cp -r "$src/convert_hf_to_gguf.py" "$src/conversion" "$src/gguf-py" "$dir/llama.cpp/"
    cp -r "$src/models/templates" "$dir/llama.cpp/models/"
    PYTHONPATH="$dir/site" "$py" -c "import llama_cpp, diskcache, sentencepiece"
    mv "$tmp/build-seconds" "$dir/.build-seconds"
    echo "$want" >"$dir/.stamp"
    echo "llama-cpp-env: made in $(($(date +%s) - t0)) s (the wheel's build" \
      "$(cat "$dir/.build-seconds") s), $(du -sh "$dir" | cut -f1)" ;;
  *)
    sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
