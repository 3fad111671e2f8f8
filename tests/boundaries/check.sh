#!/usr/bin/env bash
# Module boundaries (CMakeLists.txt, cputrain_library): what another module can include is
# exactly the public headers each folder declares, linked into BUILD/include.
#   1. every public header compiles on its own with BUILD/include as the only project include
#      root (self-contained: it includes what it uses, and only other public headers);
#   2. an internal header of a module, included from outside it, does not compile: it is not
#      on the include path (the check fails if any internal header becomes reachable).
# Usage: tests/boundaries/check.sh BUILD_DIR CXX
set -euo pipefail
build=$(cd "$1" && pwd)
cxx=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
inc="$build/include"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++20 -fsyntax-only -march=x86-64-v3 -I "$inc" -I /usr/include/hwloc)
fail=0

n=0
while IFS= read -r h; do
  rel=${h#"$inc"/}
  printf '#include "%s"\n' "$rel" >"$tmp/one.cc"
  if ! "$cxx" "${flags[@]}" "$tmp/one.cc" 2>"$tmp/err"; then
    echo "FAIL: public header $rel does not compile on its own:"; head -5 "$tmp/err"; fail=1
  fi
  n=$((n + 1))
done < <(find "$inc" -name '*.h' | sort)
echo "public headers compiled on their own: $n"
[[ $n -ge 20 ]] || { echo "FAIL: only $n public headers under $inc"; fail=1; }

# Every header in a module folder that is not in the public tree is internal.
internal=0
for dir in src/common src/comm src/config src/data src/kernels src/model src/mpi src/optim \
           src/report src/runtime src/task src/train src/cli topology alloc; do
  folder=$(basename "$dir")
  for h in "$here/$dir"/*.h; do
    name=$(basename "$h")
    [[ -e "$inc/$folder/$name" ]] && continue
    printf '#include "%s/%s"\n' "$folder" "$name" >"$tmp/internal.cc"
    if "$cxx" "${flags[@]}" "$tmp/internal.cc" 2>"$tmp/err"; then
      echo "FAIL: internal header $folder/$name compiles from outside its module"; fail=1
    elif ! grep -q "$folder/$name: No such file" "$tmp/err"; then
      echo "FAIL: $folder/$name failed for another reason than being unreachable:"; head -3 "$tmp/err"
      fail=1
    fi
    internal=$((internal + 1))
  done
done
echo "internal headers unreachable from outside their module: $internal"
[[ $internal -ge 10 ]] || { echo "FAIL: only $internal internal headers found"; fail=1; }
exit $fail
