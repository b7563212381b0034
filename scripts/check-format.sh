#!/usr/bin/env bash
# The C++ sources follow .clang-format (clang-format 14, Debian 12's): checked as the CTest "format".
#   bash scripts/check-format.sh        lists the files that differ and fails if any does
#   bash scripts/check-format.sh --fix  formats them in place
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || true)
[ -n "$cf" ] || { echo "clang-format-14 not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'tools/*.cpp' 'tools/*.h' 'include/*.h' 'tests/*.cpp' 'tests/*.h' 'fuzz/*.cpp')
[ "${#files[@]}" -gt 0 ] || { echo "no sources found: not a git checkout?" >&2; exit 1; }
if [ "${1:-}" = "--fix" ]; then "$cf" -i "${files[@]}"; exit 0; fi
bad=()
for f in "${files[@]}"; do "$cf" "$f" | cmp -s - "$f" || bad+=("$f"); done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "not formatted by .clang-format (bash scripts/check-format.sh --fix):"; printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "${#files[@]} files formatted"
