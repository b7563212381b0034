#!/usr/bin/env bash
# tandem beside llama.cpp on the newer architectures at their real layer shapes (the MoE ones with fewer layers, so that they fit
# this machine and a benchmark's time (glm-4.5-air-6l: 6 of GLM-4.5-Air's 46 layers and its MTP block, ~9.5 GB;
# deepseek-v3-2l: 2 of DeepSeek V3's 61, ~7.5 GB; qwen3.5-9b: Qwen3.5-9B whole, Gated DeltaNet and gated attention,
# ~5 GB; qwen3.5-35b-a3b-8l: 8 of Qwen3.5-35B-A3B's 40 layers and its MTP block, ~4.9 GB; llama4-scout-4l: 4 of Llama 4 Scout's 48
# layers (16 experts of 8192, 1 used, a shared expert; layer 3 NoPE), ~6 GB; random Q4_0 weights from `tandem synth`): tg and pp, 2 threads, both engines at the AVX2 level (llama.cpp
# built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON, tandem with TANDEM_CPU=avx2), one after the other per file; then
# tandem's verification passes (--vb) and MTP speculation (glm: its MTP block; random weights, so the drafts are
# rejected: what it shows is the cost of a round, not acceptance).
#   LLAMA_BENCH=/path/to/llama-bench MODELS=/tmp/archbench [SHAPES="qwen3.5-9b"] [P=512 VB=1,2,4,8,16] bash bench/moe_archs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
MODELS=${MODELS:-/tmp/archbench}
P=${P:-128} N=${N:-32} R=${R:-2} VB=${VB:-1,2,4,8}
: "${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary of llama.cpp}"
mkdir -p "$MODELS"
for s in ${SHAPES:-glm-4.5-air-6l deepseek-v3-2l qwen3.5-9b qwen3.5-35b-a3b-8l}; do
  f=$MODELS/$s-q4_0.gguf
  [ -f "$f" ] || $T synth "$f" --shape "$s" --type Q4_0
  echo "## $s Q4_0"
  TANDEM_CPU=avx2 $T bench -m "$f" -p "$P" -n "$N" -r "$R" -t 2 --vb "$VB"
  "$LLAMA_BENCH" -m "$f" -p "$P" -n "$N" -r "$R" -t 2
done
