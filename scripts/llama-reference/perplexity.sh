#!/usr/bin/env bash
# Records llama.cpp's perplexity of tests/data/perplexity/stories260K-samples.txt (text stories260K wrote itself:
# `tandem generate -m stories260K.gguf -p "Once upon a time" -n 480 --temp 0.8 -s S`, S = 1..6, one after the other)
# in chunks of 256 tokens with f16, f32 and bf16 KV caches (stories260K's head size of 8 admits no block type, in
# either engine), each chunk's running figure as llama-perplexity prints it (4 decimals), into
# tests/data/perplexity/stories260K-samples.llama.json, which Perplexity.MatchesLlamaCpp compares with.
#   LLAMA_PERPLEXITY=/path/to/llama-perplexity bash scripts/llama-reference/perplexity.sh
# (llama.cpp 2026-09 built outside the repository: `cmake --build BUILD --target llama-perplexity`, as make.sh
# configures it.)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TANDEM_SHARED_DIR:-$REPO/../shared}
: "${LLAMA_PERPLEXITY:?set LLAMA_PERPLEXITY to the llama-perplexity binary of llama.cpp}"
TEXT=$REPO/tests/data/perplexity/stories260K-samples.txt
OUT=$REPO/tests/data/perplexity/stories260K-samples.llama.json
{
  echo '{"model": "stories260K.gguf", "n_ctx": 256, "flash_attn": true, "running_ppl": {'
  sep=""
  for c in f16 f32 bf16; do
    line=$("$LLAMA_PERPLEXITY" -m "$SHARED/models/stories260K.gguf" -f "$TEXT" -c 256 -b 256 -t 1 -fa on \
      -ctk "$c" -ctv "$c" 2>&1 | grep -E '^\[1\]')
    vals=$(echo "$line" | sed -E 's/\[[0-9]+\]//g; s/,$//')
    printf '%s  "%s": [%s]\n' "$sep" "$c" "$vals"
    sep=","
  done
  echo '}}'
} > "$OUT"
echo "wrote $OUT"
