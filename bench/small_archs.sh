#!/usr/bin/env bash
# tandem beside llama.cpp on the real shapes of the small architectures (smollm3-3b, granite-3.3-2b, olmo2-1b;
# random Q4_0 weights from `tandem synth`): tg128 and pp512, 2 threads, both engines at the AVX2 level (llama.cpp
# built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON, tandem with TANDEM_CPU=avx2), run one after the other per file.
#   LLAMA_BENCH=/path/to/llama-bench MODELS=/tmp/archbench bash bench/small_archs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
MODELS=${MODELS:-/tmp/archbench}
: "${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary of llama.cpp}"
mkdir -p "$MODELS"
for s in smollm3-3b granite-3.3-2b olmo2-1b; do
  f=$MODELS/$s-q4_0.gguf
  [ -f "$f" ] || $T synth "$f" --shape "$s" --type Q4_0
  echo "## $s Q4_0"
  TANDEM_CPU=avx2 $T bench -m "$f" -p 512 -n 128 -r 3 -t 2
  "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r 3 -t 2
done
