#!/usr/bin/env bash
# Builds and runs the whole test suite.
#   bash scripts/test.sh             release build in build/, all tests
#   bash scripts/test.sh --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
#   bash scripts/test.sh --fuzz N    clang libFuzzer build of the GGUF parser, run for N seconds
# Tests read the shared data from $TANDEM_SHARED_DIR (default: ../shared beside the project root).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
case "${1:-}" in
  --sanitize)
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_SANITIZE=ON >/dev/null
    cmake --build build-asan
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs"
    ;;
  --fuzz)
    secs="${2:-30}"
    cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DTANDEM_FUZZ=ON -DTANDEM_TESTS=OFF \
      -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" >/dev/null
    cmake --build build-fuzz --target fuzz_gguf tandem
    corpus=$(mktemp -d)
    cp "${TANDEM_SHARED_DIR:-../shared}/models/stories260K.gguf" "$corpus/"
    # a small quantized model too, so the fuzzer reaches the Q8_0 repacking and BPE-free quantized paths
    ./build-fuzz/bin/tandem synth "$corpus/tiny-q8_0.gguf" --shape tiny-test --type Q8_0 2>/dev/null
    ./build-fuzz/bin/fuzz_gguf -max_total_time="$secs" -rss_limit_mb=4096 "$corpus" 2>&1 | tail -n 3
    rm -rf "$corpus"
    ;;
  *)
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build
    ctest --test-dir build --output-on-failure -j "$jobs"
    ;;
esac
