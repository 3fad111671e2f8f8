#!/usr/bin/env bash
# Format check (CI step): every tracked C/C++ source (.cc .h .c .cpp) must be as the repository's
# .clang-format formats it, with clang-format 14 (Debian bookworm's; other versions format some
# constructs differently, so a newer one may disagree with CI). Generated tables (*.inc) are not
# checked. Prints each file that differs and the command that fixes it; exits 1 if any does.
# Usage: scripts/check_format.sh [CLANG_FORMAT]   (default: clang-format-14, else clang-format)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cf="${1:-}"
if [ -z "$cf" ]; then
  if command -v clang-format-14 >/dev/null 2>&1; then cf=clang-format-14; else cf=clang-format; fi
fi
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "check_format: $cf not found (scripts/install-deps.sh installs clang-format)" >&2
  exit 2
fi
version=$("$cf" --version)
case "$version" in
  *"version 14."*) ;;
  *) echo "check_format: warning: CI uses clang-format 14, this is: $version" >&2 ;;
esac

mapfile -d '' files < <(git ls-files -z -- '*.cc' '*.h' '*.c' '*.cpp')
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done

if [ "${#bad[@]}" -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:"
  printf '  %s\n' "${bad[@]}"
  echo "fix with:"
  printf "  $cf -i %s\n" "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
