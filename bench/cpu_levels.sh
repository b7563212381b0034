#!/usr/bin/env bash
# Forced SIMD levels (TANDEM_CPU) on the tinyllama-1.1b shape, 2 threads, beside llama.cpp built without AVX-512
# when LLAMA_BENCH points at its llama-bench. Build llama.cpp outside the repository, e.g. from the source inside
# the npm package node-llama-cpp@3.22.1 (package/llama/gitRelease.bundle, a git bundle):
#   cmake -S src -B build-avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
#     -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX_VNNI=OFF -DGGML_OPENMP=OFF \
#     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
#   cmake --build build-avx2 --target llama-bench
# Usage: MODELS=/work/models LLAMA_BENCH=/path/llama-bench LEVELS="avx2" bash bench/cpu_levels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
MODELS=${MODELS:-/tmp/tandem-models}
VOCAB=${TANDEM_SHARED_DIR:-../shared}/tokenizer-tests/ggml-vocab-llama-spm.gguf
LEVELS=${LEVELS:-avx2}
TYPES=${TYPES:-"Q8_0 Q4_0 Q4_K_M"}
mkdir -p "$MODELS"
for type in $TYPES; do
  m="$MODELS/tinyllama-$(echo "$type" | tr 'A-Z' 'a-z').gguf"
  [ -f "$m" ] || $T synth "$m" --shape tinyllama-1.1b --type "$type" --vocab "$VOCAB" --seed 1
  for level in $LEVELS; do
    echo "## tandem, TANDEM_CPU=$level, $type"
    TANDEM_CPU=$level $T bench -m "$m" -p 512 -n 128 --vb 1,2,4,8,16 -r 3 -t 2
  done
  if [ -n "${LLAMA_BENCH:-}" ]; then
    echo "## llama.cpp ($LLAMA_BENCH), $type"
    "$LLAMA_BENCH" -m "$m" -p 512 -n 128 -t 2 -r 3 2>/dev/null
  fi
done
