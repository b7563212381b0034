#!/usr/bin/env bash
# Regenerates tests/data/reference-arch/: llama.cpp's teacher-forcing references on the tiny-ref-* models that
# `tandem synth` writes (seed 1, Q8_0), and tests/data/reference-depth/: the steps after a 4096- and a 16384-token
# prompt on tiny-ref-smollm3 with F16 and Q8_0 KV caches, and after an 8300-token one on tiny-ref-llama4. llama.cpp is built outside the repository, from the source in the npm
# package node-llama-cpp@3.22.1 (llama.cpp 2026-09, commit de3ff815), or from $LLAMA_CPP_SRC. Its CPU backend is
# built for AVX2 (not -march=native: on a CPU with AMX, ggml's AMX Q8_0 kernel crashed in this container), so the
# references do not depend on the machine that made them.
#
#   bash scripts/llama-reference/make.sh            (needs build/bin/tandem; ~15 min on 2 cores for libllama)
#
# Env: WORK (scratch dir, default /tmp/tandem-llama-reference), LLAMA_CPP_SRC, TANDEM_BIN.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/tandem-llama-reference}
TANDEM_BIN=${TANDEM_BIN:-$REPO/build/bin/tandem}
OUT=$REPO/tests/data/reference-arch
mkdir -p "$WORK" "$OUT"
SRC=${LLAMA_CPP_SRC:-}
if [ -z "$SRC" ]; then
  SRC=$WORK/llama.cpp
  if [ ! -d "$SRC" ]; then
    (cd "$WORK" && npm pack node-llama-cpp@3.22.1 >/dev/null && tar xzf node-llama-cpp-3.22.1.tgz &&
      git clone -q package/llama/gitRelease.bundle llama.cpp)
  fi
fi
if [ ! -f "$WORK/build/src/libllama.a" ]; then
  cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_OPENMP=OFF >/dev/null
  cmake --build "$WORK/build" --target llama -j"$(nproc)"
fi
g++ -O2 -std=c++17 -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/src" "$REPO/scripts/llama-reference/reference_logits.cpp" \
  "$WORK/build/src/libllama.a" $(find "$WORK/build/ggml/src" -name 'libggml*.a' | sort -r) -lpthread -ldl \
  -o "$WORK/reference_logits"
PROMPTS=("Once upon a time" "The capital of France is" "def fibonacci(n):")
# Q8_0 files, and the MoE models with a choice bias in F16: with 8-bit activations their routers' near-ties flip
# in one engine or the other at a few steps in a hundred (moving them by up to ~2); in F16 both engines agree to
# ~0.003 everywhere, a far tighter test.
for case in smollm3:q8_0 granite:q8_0 olmo2:q8_0 mistral3:q8_0 glm4moe:f16 deepseek2:f16 qwen35:f16 qwen35moe:f16 qwen3next:f16 llama4:f16 gemma4:f16 gemma4moe:f16; do
  arch=${case%%:*} type=${case##*:}
  model=$WORK/tiny-ref-$arch-$type.gguf
  "$TANDEM_BIN" synth "$model" --shape tiny-ref-$arch --type "${type^^}" --seed 1
  "$WORK/reference_logits" "$model" 32 "${PROMPTS[@]}" > "$OUT/tiny-ref-$arch-$type.greedy.json"
  echo "wrote $OUT/tiny-ref-$arch-$type.greedy.json"
done
# the multi-token-prediction blocks, as llama.cpp's draft-mtp runs them
for name in tiny-ref-glm4moe-f16 tiny-ref-deepseek2-f16 tiny-ref-qwen35-f16 tiny-ref-qwen35moe-f16 tiny-ref-qwen3next-f16; do
  "$WORK/reference_logits" "$WORK/$name.gguf" --mtp 8 "${PROMPTS[@]}" > "$OUT/$name.mtp.json"
  echo "wrote $OUT/$name.mtp.json"
done
# the Gemma 4 assistant on its target, as llama.cpp's draft-mtp drafts with it
"$TANDEM_BIN" synth "$WORK/tiny-ref-gemma4-assistant-f16.gguf" --shape tiny-ref-gemma4-assistant --type F16 --seed 1
"$WORK/reference_logits" "$WORK/tiny-ref-gemma4-f16.gguf" --assistant "$WORK/tiny-ref-gemma4-assistant-f16.gguf" 8 \
  "${PROMPTS[@]}" > "$OUT/tiny-ref-gemma4-assistant-f16.chain.json"
echo "wrote $OUT/tiny-ref-gemma4-assistant-f16.chain.json"
# an EAGLE-3 head on its llama target, as llama.cpp's draft-eagle3 drafts with it
for shape in tiny-ref-llama tiny-ref-qwen3 tiny-ref-eagle3; do
  "$TANDEM_BIN" synth "$WORK/$shape-f16.gguf" --shape $shape --type F16 --seed 1
done
"$WORK/reference_logits" "$WORK/tiny-ref-llama-f16.gguf" --eagle3 "$WORK/tiny-ref-eagle3-f16.gguf" 8 \
  "${PROMPTS[@]}" > "$OUT/tiny-ref-eagle3-f16.eagle3.json"
"$WORK/reference_logits" "$WORK/tiny-ref-qwen3-f16.gguf" --eagle3 "$WORK/tiny-ref-eagle3-f16.gguf" 8 \
  "${PROMPTS[@]}" > "$OUT/tiny-ref-eagle3-f16.qwen3.eagle3.json"
echo "wrote $OUT/tiny-ref-eagle3-f16.eagle3.json and tiny-ref-eagle3-f16.qwen3.eagle3.json"
DEPTH=$REPO/tests/data/reference-depth
mkdir -p "$DEPTH"
for d in 4096 16384; do
  for c in f16 q8_0; do
    "$WORK/reference_logits" "$WORK/tiny-ref-smollm3-q8_0.gguf" --depth $d --cache $c 8 > "$DEPTH/tiny-ref-smollm3-q8_0.d$d.$c.json"
    echo "wrote $DEPTH/tiny-ref-smollm3-q8_0.d$d.$c.json"
  done
done
# Llama 4 past its first chunk of 8192 positions (chunked attention, the NoPE layer's temperature)
"$WORK/reference_logits" "$WORK/tiny-ref-llama4-f16.gguf" --depth 8300 --cache f16 8 > "$DEPTH/tiny-ref-llama4-f16.d8300.f16.json"
echo "wrote $DEPTH/tiny-ref-llama4-f16.d8300.f16.json"
