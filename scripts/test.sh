#!/usr/bin/env bash
# Builds and runs the whole test suite.
#   bash scripts/test.sh             release build in build/, all tests
#   bash scripts/test.sh --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/ (clang), all
#                                    tests; the same tree holds the libFuzzer target of the GGUF parser
#   bash scripts/test.sh --fuzz N    the GGUF parser fuzzed for N seconds (builds fuzz_gguf in build-asan/)
# One step of those, as .ci/run times them: --step build|test|asan-build|asan-test|fuzz [N]
# Tests read the shared data from $TANDEM_SHARED_DIR (default: ../shared beside the project root).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

build() {
  # a unity build of the library and tools (TANDEM_UNITY: 16 sources per compiler run; the per-ISA units and the
  # test files one by one): the same code, built in about two thirds of the time
  [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_UNITY=ON >/dev/null
  cmake --build build
}
# The Vulkan tests (Vulkan.*) run where this build has the Vulkan backend and the machine a Vulkan device (Mesa's
# lavapipe counts): then they are required (TANDEM_REQUIRE_VULKAN=1: a missing device fails them) and run with the
# validation layer; elsewhere they skip, and this says so.
vulkan_tests() {
  local tree=$1 devs
  devs=$("$tree/bin/tandem" --list-devices 2>/dev/null | grep -c '^  [0-9]' || true)
  if [ "${devs:-0}" -gt 0 ]; then
    export TANDEM_REQUIRE_VULKAN=1
    echo "Vulkan tests: on $("$tree/bin/tandem" --list-devices 2>/dev/null | sed -n 's/^  0: //p')"
  else
    echo "Vulkan tests: skipped ($("$tree/bin/tandem" --list-devices 2>&1 | tail -n 1))"
  fi
}
run_tests() {
  vulkan_tests build
  ctest --test-dir build --output-on-failure -j "$jobs"
}
# The sanitizer tree: clang (faster to build than g++ under ASan), -O1 with line tables (symbolized stacks without
# full debug info), a unity build of the library and tools (CMake option TANDEM_UNITY), and the fuzz target beside
# the tests, so one build serves both.
asan_build() {
  [ -f build-asan/build.ninja ] || cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DTANDEM_SANITIZE=ON -DTANDEM_FUZZ=ON -DTANDEM_UNITY=ON >/dev/null
  cmake --build build-asan
}
asan_tests() {
  # TANDEM_TEST_QUICK: the statistical and speculative-identity tests run their reduced variants under the
  # sanitizer (the full ones run in the release suite); they print so. The static checks (formatting, the ISA
  # leak scan of the binaries, the include boundary) run no code under the sanitizer: the release suite runs them.
  # Left to the release suite too: split_mpi (mpirun: Open MPI's own allocations; its in-process twin Split.* runs
  # here) and replicas (HAProxy in front of two servers: what it tests is the balancer's configuration and the
  # drain, whose code the server suites here exercise). The llama.cpp references on the GPU (*OnTheGpu*: the
  # forward pass's code is the CPU's, which the sanitizer checks here; what differs, the Vulkan backend, its own
  # tests Vulkan.* and Gpu.* check here) are left to the release suite too, as are speculation's GPU tests
  # (Speculative.Gpu*: the CPU's speculative code, run here on the CPU, over ~2 minutes of lavapipe passes) and
  # the model-level GPU tests (Gpu.*: the pass's code is the CPU's; server_gpu runs the GPU's host side here).
  vulkan_tests build-asan
  TANDEM_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -E '^(format|isa_leaks|include_boundary|split_mpi|replicas)$|OnTheGpu|Speculative.Gpu|^Gpu\.'
}
fuzz() {
  local secs=$1 corpus
  [ -x build-asan/bin/fuzz_gguf ] || asan_build
  corpus=$(mktemp -d)
  cp "${TANDEM_SHARED_DIR:-../shared}/models/stories260K.gguf" "$corpus/"
  # a small quantized model too, so the fuzzer reaches the Q8_0 repacking and BPE-free quantized paths
  ./build-asan/bin/tandem synth "$corpus/tiny-q8_0.gguf" --shape tiny-test --type Q8_0 2>/dev/null
  local rc=0
  ./build-asan/bin/fuzz_gguf -max_total_time="$secs" -rss_limit_mb=4096 "$corpus" 2>&1 | tail -n 3 || rc=$?
  rm -rf "$corpus"
  return "$rc"
}

case "${1:-}" in
  --sanitize) asan_build; asan_tests ;;
  --fuzz) fuzz "${2:-30}" ;;
  --step)
    case "${2:-}" in
      build) build ;;
      test) run_tests ;;
      asan-build) asan_build ;;
      asan-test) asan_tests ;;
      fuzz) fuzz "${3:-30}" ;;
      *) echo "unknown step '${2:-}' (build, test, asan-build, asan-test, fuzz)" >&2; exit 2 ;;
    esac ;;
  "") build; run_tests ;;
  *) echo "unknown argument '$1' (--sanitize, --fuzz N, --step NAME)" >&2; exit 2 ;;
esac
