#!/usr/bin/env bash
# Reproduces every figure of bench/README.md on this machine. Writes models to $MODELS (default /tmp/tandem-models,
# about 9 GB) and prints the tables. Run from the project root after building (build/bin/tandem).
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
SHARED=${TANDEM_SHARED_DIR:-../shared}
MODELS=${MODELS:-/tmp/tandem-models}
VOCAB=$SHARED/tokenizer-tests/ggml-vocab-llama-spm.gguf
mkdir -p "$MODELS"
synth() { [ -f "$MODELS/$1.gguf" ] || $T synth "$MODELS/$1.gguf" --shape "$2" --type "$3" --vocab "$VOCAB" --seed "$4"; }
synth tinyllama-q8_0 tinyllama-1.1b Q8_0 1
synth tinyllama-q4_0 tinyllama-1.1b Q4_0 1
synth tinyllama-q4_0-other tinyllama-1.1b Q4_0 2     # unrelated weights: a useless draft
synth tinyllama-q4_k_m tinyllama-1.1b Q4_K_M 1       # llama.cpp's most used mix (Q4_K, Q6_K output and some layers)
synth tinyllama-q5_k_m tinyllama-1.1b Q5_K_M 1
[ "${SKIP_7B:-0}" = 1 ] || synth llama2-7b-q8_0 llama-2-7b Q8_0 3

echo "## tinyllama-1.1b shape, 2 threads"
for m in tinyllama-q8_0 tinyllama-q4_0 tinyllama-q4_k_m tinyllama-q5_k_m; do
  $T bench -m "$MODELS/$m.gguf" -p 512 -n 128 --vb 1,2,4,8,16 -r 3 -t 2
done
echo "## stories260K, 1 thread"
$T bench -m "$SHARED/models/stories260K.gguf" -p 512 -n 128 --vb 1,8 -r 5 -t 1
echo "## speculative: stories260K with self / ngram / Q4_0 draft (real weights)"
$T quantize "$SHARED/models/stories260K.gguf" "$MODELS/stories-q4_0.gguf" Q4_0 2>/dev/null
REP="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. Once upon a time, there was a little girl named Lily."
$T bench -m "$SHARED/models/stories260K.gguf" -p 0 -n 0 --vb 1,2,4,8,16 -r 3 -t 1 --spec-type ngram --prompt "$REP" --spec-n 256
$T bench -m "$SHARED/models/stories260K.gguf" -p 0 -n 0 --vb 1,2,4,8,16 -r 3 -t 1 --spec-type self --draft-layers 3 --spec-n 256
$T bench -m "$SHARED/models/stories260K.gguf" -p 0 -n 0 --vb 1,2,4,8,16 -r 3 -t 1 -md "$MODELS/stories-q4_0.gguf" --spec-n 256
if [ "${SKIP_7B:-0}" != 1 ]; then
  echo "## llama-2-7b shape Q8_0 target, tinyllama-1.1b shape Q4_0 draft of unrelated weights (acceptance ~0)"
  $T bench -m "$MODELS/llama2-7b-q8_0.gguf" -p 0 -n 32 --vb 1,2,4,8,16 -r 6 -t 2 -md "$MODELS/tinyllama-q4_0-other.gguf" --spec-n 64 --draft-max 8
  $T bench -m "$MODELS/llama2-7b-q8_0.gguf" -p 0 -n 0 --vb 1,9 -r 1 -t 2 -md "$MODELS/tinyllama-q4_0-other.gguf" --spec-n 64 --draft-max 8 --draft-adaptive off --draft-p-min 0
fi
echo "## tokenizer throughput"
for i in $(seq 1 100); do cat "$SHARED"/tokenizer-tests/*.inp; done > "$MODELS/mixed.txt"
$T bench -m "$SHARED/tokenizer-tests/ggml-vocab-llama-spm.gguf" --tokenize "$MODELS/mixed.txt" -r 3
$T bench -m "$SHARED/tokenizer-tests/ggml-vocab-gpt-2.gguf" --tokenize "$MODELS/mixed.txt" -r 3
