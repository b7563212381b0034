#!/usr/bin/env bash
# Fetches the real chat templates the conformance test renders (llama.cpp's models/templates, 70 Jinja files of
# current models) outside the repository: from the llama.cpp source inside the npm package node-llama-cpp
# (llama/gitRelease.bundle, a git bundle), the same release tests/data/chat-templates was generated from.
#   usage: bash scripts/fetch-chat-templates.sh [DEST]   (default: $TANDEM_CHAT_TEMPLATES or ~/.cache/tandem/chat-templates)
set -euo pipefail
DEST="${1:-${TANDEM_CHAT_TEMPLATES:-$HOME/.cache/tandem/chat-templates}}"
if [ -f "$DEST/meta-llama-Llama-3.1-8B-Instruct.jinja" ]; then
  echo "chat templates: already in $DEST"
  exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
( cd "$WORK" && npm pack node-llama-cpp@3.22.1 --silent >/dev/null && tar -xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle )
git clone -q --no-checkout "$WORK/package/llama/gitRelease.bundle" "$WORK/llama.cpp"
mkdir -p "$DEST"
git -C "$WORK/llama.cpp" archive HEAD models/templates | tar -x -C "$WORK"
cp "$WORK"/models/templates/*.jinja "$DEST"/
echo "chat templates: $(ls "$DEST"/*.jinja | wc -l) files in $DEST"
