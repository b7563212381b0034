#!/usr/bin/env bash
# Regenerates tests/data/reference-f32/: llama.cpp's teacher-forcing references on an F32 copy of the tiny model of
# every architecture (`tandem synth --type F32`, seed 1) through an F32 KV cache (reference_logits --kv-f32), so that
# nothing on either side is rounded to F16 or 8 bits: the two engines then agree to ~1e-5 on any prompt, and the
# test (tests/test_reference.cpp F32Reference) holds tandem to 1e-4 at every step. llama.cpp as in make.sh (built
# outside the repository from node-llama-cpp@3.22.1's source, or $LLAMA_CPP_SRC; libllama reused from $WORK).
#
#   bash scripts/llama-reference/make-f32.sh        (needs build/bin/tandem; libllama ~15 min on 2 cores)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/tandem-llama-reference}
TANDEM_BIN=${TANDEM_BIN:-$REPO/build/bin/tandem}
OUT=$REPO/tests/data/reference-f32
mkdir -p "$WORK" "$OUT"
SRC=${LLAMA_CPP_SRC:-$WORK/llama.cpp}
if [ ! -d "$SRC" ]; then
  (cd "$WORK" && npm pack node-llama-cpp@3.22.1 >/dev/null && tar xzf node-llama-cpp-3.22.1.tgz &&
    git clone -q package/llama/gitRelease.bundle llama.cpp)
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
# Other prompts than make.sh's: these references must not depend on the prompts the others were tuned on.
PROMPTS=("In the beginning the universe was created" "Q: What is 17 times 23? A:" "<html><body><h1>Title</h1>")
for shape in tiny-ref-llama tiny-ref-qwen3 tiny-test-qwen3moe tiny-test-gemma3 \
  tiny-ref-smollm3 tiny-ref-granite tiny-ref-olmo2 tiny-ref-mistral3 tiny-ref-glm4moe tiny-ref-deepseek2 \
  tiny-ref-llama4 tiny-ref-gemma4 tiny-ref-gemma4moe tiny-ref-qwen35 tiny-ref-qwen35moe tiny-ref-qwen3next; do
  model=$WORK/$shape-f32.gguf
  [ -f "$model" ] || "$TANDEM_BIN" synth "$model" --shape "$shape" --type F32 --seed 1 >/dev/null
  "$WORK/reference_logits" "$model" --kv-f32 32 "${PROMPTS[@]}" > "$OUT/$shape-f32.greedy.json"
  echo "wrote $OUT/$shape-f32.greedy.json"
done
# phi3, gpt-oss and qwen2 (whose tiny synth shapes carry no vocabulary llama.cpp loads): the shared files
# dequantized to F32 (`tandem quantize FILE OUT F32`, as the test makes them)
SHARED=${TANDEM_SHARED_DIR:-$REPO/../shared}
for f in models-modern/synth-phi3-phi3spm-q8_0 models-modern/synth-gptoss-spm-f16-mxfp4 models/synth-qwen2-gpt2bpe-bf16; do
  name=$(basename "$f")
  model=$WORK/$name.f32.gguf
  [ -f "$model" ] || "$TANDEM_BIN" quantize "$SHARED/$f.gguf" "$model" F32 >/dev/null
  "$WORK/reference_logits" "$model" --kv-f32 32 "${PROMPTS[@]}" > "$OUT/$name.f32.greedy.json"
  echo "wrote $OUT/$name.f32.greedy.json"
done
