#!/usr/bin/env bash
# What a quantized KV cache costs in quality (issue 31), tandem beside llama.cpp on the same file and text: the
# KL divergence of the next-token distribution from the f16 cache's, the share of predictions whose argmax is
# unchanged, and the perplexity, for each cache type (keys and values of the same type), in chunks of $C tokens
# of the text (default: tests/data/perplexity/stories260K-samples.txt). stories260K's head size (8) takes no block
# type in either engine, so the model is a random-weight file of a real shape with head size 64 (tinyllama-1.1b):
# its distributions are flat, so the figures measure how far each cache moves the logits, not language quality.
#   LLAMA_PERPLEXITY=.../llama-perplexity MODELS=/tmp/depth [TYPES="q8_0 q5_0 q4_0"] bash bench/kv_quality.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
MODELS=${MODELS:-/tmp/tandem-models}
SHAPE=${SHAPE:-tinyllama-1.1b} WTYPE=${WTYPE:-Q8_0} C=${C:-512}
TEXT=${TEXT:-tests/data/perplexity/stories260K-samples.txt}
: "${LLAMA_PERPLEXITY:?set LLAMA_PERPLEXITY to the llama-perplexity binary of llama.cpp}"
mkdir -p "$MODELS"
f=$MODELS/$SHAPE-${WTYPE,,}.gguf
[ -f "$f" ] || $T synth "$f" --shape "$SHAPE" --type "$WTYPE"
base=$(mktemp -d)/f16.kld
"$LLAMA_PERPLEXITY" -m "$f" -f "$TEXT" -c "$C" -b "$C" -t 2 -fa on --kl-divergence-base "$base" 2>&1 |
  grep -E "Final estimate" | sed 's/^/llama.cpp f16: /'
for c in ${TYPES:-q8_0 q5_0 q4_0}; do
  echo "## $c against f16"
  $T perplexity -m "$f" -f "$TEXT" -c "$C" -t 2 -ctk "$c" -ctv "$c" --kld-base-cache f16 2>/dev/null | sed 's/^/tandem: /'
  "$LLAMA_PERPLEXITY" -m "$f" -f "$TEXT" -c "$C" -b "$C" -t 2 -fa on -ctk "$c" -ctv "$c" --kl-divergence-base "$base" \
    --kl-divergence 2>&1 | grep -E "Mean    KLD|Maximum KLD|Same top p|Mean PPL\(Q\)|Mean PPL\(base\)" | sed 's/^/llama.cpp: /'
done
rm -f "$base"
