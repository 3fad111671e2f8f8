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
# Every module folder: each folder of src/ (so a new one is covered the day it is made), and the
# two at the top level.
module_dirs=()
while IFS= read -r d; do module_dirs+=("src/$d"); done < <(cd "$here/src" && find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
module_dirs+=(topology alloc)
for dir in "${module_dirs[@]}"; do
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

# 3. The folders are layers: the graph of which folder includes which (a source or header of
#    folder A naming "B/...") has no cycle, so no two folders include each other and nothing
#    climbs back to a folder above it. Printed bottom-up.
python3 - "$here" "${module_dirs[@]}" <<'PY' || fail=1
import os, re, sys
here, dirs = sys.argv[1], sys.argv[2:]
names = {os.path.basename(d): d for d in dirs}
inc = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.M)
edges = {n: set() for n in names}
for n, d in names.items():
    for root, _, files in os.walk(os.path.join(here, d)):
        for f in files:
            if f.endswith((".h", ".cc", ".inc")):
                for m in inc.findall(open(os.path.join(root, f), errors="replace").read()):
                    if m in names and m != n:
                        edges[n].add(m)
order, state = [], {}
def visit(n, path):
    if state.get(n) == "done":
        return True
    if state.get(n) == "open":
        cyc = path[path.index(n):] + [n]
        print("FAIL: the folders include each other in a cycle: " + " -> ".join(cyc))
        return False
    state[n] = "open"
    ok = all(visit(m, path + [n]) for m in sorted(edges[n]))
    state[n] = "done"
    order.append(n)
    return ok
ok = all(visit(n, []) for n in sorted(names))
print("folder layers, bottom up: " + " < ".join(order))
sys.exit(0 if ok else 1)
PY
exit $fail
