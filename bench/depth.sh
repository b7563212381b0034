#!/usr/bin/env bash
# Long context beside llama.cpp (issue 31): at each depth D (positions already in the KV cache), 16 generated
# tokens (tg16), one forward pass of 1 and of 8 tokens (tandem's vb1/vb8, llama-bench's pp1/pp8: a verification
# pass of 7 drafted tokens), both engines at the same SIMD level (llama.cpp built with -DGGML_NATIVE=OFF
# -DGGML_AVX2=ON, tandem with TANDEM_CPU=$LEVELS), flash attention and the same cache type, 2 threads, one engine
# after the other. Peak RSS of each run comes from /usr/bin/time; llama-bench's includes a host copy of the
# depth's KV state that it keeps to restore between repetitions (the size of the cache's first D positions).
# Then the memory a 32768-position context takes with a q8_0 cache: tandem generate beside llama-completion,
# a short prompt, 16 tokens (both allocate and clear the whole cache at start).
#   LLAMA_BENCH=.../llama-bench LLAMA_COMPLETION=.../llama-completion MODELS=/tmp/depth \
#     [DEPTHS="16384 32768"] [TYPES="q8_0"] [LEVELS="avx2"] [SHAPE=tinyllama-1.1b] [WTYPE=Q8_0] bash bench/depth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
MODELS=${MODELS:-/tmp/tandem-models}
SHAPE=${SHAPE:-tinyllama-1.1b} WTYPE=${WTYPE:-Q8_0}
: "${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary of llama.cpp}"
mkdir -p "$MODELS"
f=$MODELS/$SHAPE-${WTYPE,,}.gguf
[ -f "$f" ] || $T synth "$f" --shape "$SHAPE" --type "$WTYPE"
for d in ${DEPTHS:-16384 32768}; do
  for c in ${TYPES:-q8_0}; do
    for lv in ${LEVELS:-avx2}; do
      echo "## tandem ($lv), $SHAPE $WTYPE, depth $d, cache $c"
      TANDEM_CPU=$lv /usr/bin/time -f "peak RSS %M KiB" $T bench -m "$f" -p 0 -n 16 --vb 1,8 -d "$d" -ctk "$c" -ctv "$c" \
        -r 2 -t 2
    done
    echo "## llama.cpp, $SHAPE $WTYPE, depth $d, cache $c"
    /usr/bin/time -f "peak RSS %M KiB" "$LLAMA_BENCH" -m "$f" -fa 1 -ctk "$c" -ctv "$c" -d "$d" -p 1,8 -n 16 -r 2 -t 2
  done
done
if [ -n "${LLAMA_COMPLETION:-}" ]; then
  for lv in ${LEVELS:-avx2}; do
    echo "## memory at -c 32768, q8_0 cache: tandem ($lv)"
    TANDEM_CPU=$lv /usr/bin/time -f "peak RSS %M KiB" $T generate -m "$f" -c 32768 -ctk q8_0 -ctv q8_0 -p "Once upon a time" \
      -n 16 -t 2 >/dev/null
  done
  echo "## memory at -c 32768, q8_0 cache: llama.cpp"
  /usr/bin/time -f "peak RSS %M KiB" "$LLAMA_COMPLETION" -m "$f" -c 32768 -fa on -ctk q8_0 -ctv q8_0 \
    -p "Once upon a time" -n 16 -t 2 -no-cnv </dev/null >/dev/null
fi
