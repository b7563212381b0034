#!/usr/bin/env bash
# The library boundary, checked as the CTest "include_boundary":
#   - tools/ includes the public headers (include/tandem/...) and its own headers, never src/ internals;
#   - src/ and include/ never include anything of tools/;
#   - include/tandem/ headers include only other public headers (and system/third-party ones).
# A quoted include is resolved by its first path component: tandem/ is public; args.h, io.h, commands.h,
# llama_flags.h, server/..., bench/... are tools' own; anything else (core/, serve/, grammar/, ...) is src/.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
report() { echo "$1"; bad=1; }
while IFS= read -r line; do
  file=${line%%:*}; inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
  case "$inc" in
    tandem/*) ;;
    *)
      dir=$(dirname "$file")
      if [ -e "$dir/$inc" ] || [ -e "tools/tandem/$inc" ]; then :; else report "$file: includes \"$inc\" (not a public header: use include/tandem/)"; fi ;;
  esac
done < <(git grep -n '#include "' -- 'tools/*.cpp' 'tools/*.h' | sed -E 's/^([^:]+):[0-9]+:/\1:/')
while IFS= read -r line; do
  report "$line (src/ and include/ must not reach into tools/)"
done < <(git grep -nE '#include "(args|io|commands|llama_flags)\.h"|#include "server/|#include "bench/' -- 'src/*' 'include/*' || true)
while IFS= read -r line; do
  report "$line (a public header includes an internal one)"
done < <(git grep -nE '#include "' -- 'include/*' | grep -v '#include "tandem/' || true)
[ "$bad" = 0 ] && echo "include boundary holds: tools/ -> include/tandem/ only; nothing reaches tools/"
exit "$bad"
