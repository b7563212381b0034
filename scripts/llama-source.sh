#!/usr/bin/env bash
# Prints the path of a llama.cpp source tree (llama.cpp 2026-09, the release the project compares with):
# $LLAMACPP_SRC when it is one, else one cloned from the git bundle inside the npm package node-llama-cpp@3.22.1
# into DIR (kept there for the next call).
#   bash scripts/llama-source.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/llama-source.sh DIR}
if [[ -n "${LLAMACPP_SRC:-}" && -f "$LLAMACPP_SRC/CMakeLists.txt" && -d "$LLAMACPP_SRC/tools" ]]; then
  cd "$LLAMACPP_SRC" && pwd -P
  exit 0
fi
if [[ ! -f "$dir/llama.cpp/CMakeLists.txt" ]]; then
  command -v npm >/dev/null || { echo "npm is needed to get llama.cpp's source (or set LLAMACPP_SRC)" >&2; exit 1; }
  mkdir -p "$dir/npm"
  (cd "$dir/npm" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null)
  tar -xzf "$dir/npm/node-llama-cpp-3.22.1.tgz" -C "$dir/npm" package/llama/gitRelease.bundle
  rm -rf "$dir/llama.cpp"
  git -c advice.detachedHead=false clone -q "$dir/npm/package/llama/gitRelease.bundle" "$dir/llama.cpp" >&2
fi
cd "$dir/llama.cpp" && pwd -P
