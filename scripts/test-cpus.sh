#!/usr/bin/env bash
# The CPU matrix: every SIMD level's kernels, the reference-agreement and speculative-identity tests, and a
# `tandem generate` per weight type, on the levels this machine has (forced with TANDEM_CPU) and on CPUs it is
# not (user-mode emulation):
#   x86-64 (build/):                qemu-x86_64 -cpu qemu64 -> scalar,  -cpu Haswell -> avx2
#   AArch64 (build-arm64/, cross):  qemu-aarch64 -cpu cortex-a72 -> neon,  -cpu max -> i8mm
# (dotprod: forced on -cpu max, with the lighter subset; the kernel tests of every run cover all levels below.)
# Every run sets TANDEM_EXPECT_CPU, so a CPU that gets another level than expected fails (Cpu.DispatchedLevel...),
# and the generated tokens of each emulated CPU must equal those of the same level run natively (x86) or of the
# other ARM levels (whose integer sums are exact and float order identical).
#   bash scripts/test-cpus.sh            native levels + x86 emulation + AArch64 cross build and emulation
#   bash scripts/test-cpus.sh --no-arm   without the AArch64 part
# Needs qemu-user and, for AArch64, g++-aarch64-linux-gnu and the arm64 -dev packages (scripts/install-deps.sh --cpus).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${TANDEM_SHARED_DIR:-../shared}
ARM=1
[ "${1:-}" = "--no-arm" ] && ARM=0
start=$(date +%s)
fail=0

# Kernels, reference agreement, speculative identity, batching (not the tests that spawn the tandem binary: a
# cross-built one cannot run without binfmt_misc, which CI machines may lack).
export TANDEM_TEST_QUICK=1  # the speculative identity test's reduced matrix (it prints so)
# Natively at every level: also every newer architecture's reference and the MoE speculative tests. Under
# emulation (~50x slower) the MoE speculative tests and the per-architecture batching test are left to the native
# runs; the qwen3moe and gpt-oss references still exercise the expert, MXFP4 and sink paths there. So are the
# sampling-distribution tests of token trees and proposer lists (they check the rule, not the CPU's kernels; the
# trees' greedy identity test and the tree attention test run everywhere).
NATIVE_FILTER='Quant.*:Cpu.*:Reference.*:AllSynth/*:AllModern/*:Speculative.*:Session.*-Speculative.IncompatiblePairsAreRefused'
FILTER='Quant.*:Cpu.*:Reference.*:AllSynth/*:AllModern/*qwen3moe*:AllModern/*gptoss*:Speculative.*:Session.*-Speculative.IncompatiblePairsAreRefused:Speculative.Moe*:Session.EveryArchitecture*:Speculative.TokenTreeSampling*:Speculative.ProposerList*'
MODELS="stories260K synth-llama-spm-q8_0 synth-llama-spm-q4_0 synth-llama-spm-q4_k_m synth-llama-spm-q5_k_m synth-llama3ish-gpt2bpe-f16 synth-qwen2-gpt2bpe-bf16"

# A lighter subset for extra forced levels on an emulated CPU: the kernels (every level the CPU has) and the
# reference agreement.
KERNELS='Quant.*:Cpu.*:AllSynth/*'

# run LABEL EXPECTED_LEVEL RUNNER... : the test subset ($filter, default $FILTER), then generate per model; the
# tokens go to $out/LABEL.tokens.
run() {
  local label=$1 level=$2; shift 2
  local t0; t0=$(date +%s)
  if ! TANDEM_EXPECT_CPU=$level "$@" "$tests" --gtest_filter="${filter:-$FILTER}" --gtest_brief=1 > "$out/$label.log" 2>&1; then
    echo "FAIL $label: tests (log below)"; tail -n 30 "$out/$label.log"; fail=1
  fi
  : > "$out/$label.tokens"
  for m in $MODELS; do
    if ! TANDEM_EXPECT_CPU=$level "$@" "$bin" generate -m "$SHARED/models/$m.gguf" -p "Once upon a time" -n 8 --temp 0 --json \
        2>"$out/$label.$m.err" | python3 -c "import json,sys; print('$m', json.load(sys.stdin)['tokens'])" >> "$out/$label.tokens"; then
      echo "FAIL $label: generate $m"; tail -n 5 "$out/$label.$m.err"; fail=1
    fi
  done
  echo "$label ($level): $(grep -c '' "$out/$label.tokens") models generated, tests $(grep -Eo '[0-9]+ tests? from [0-9]+ test suites? ran' "$out/$label.log" | head -1), $(( $(date +%s) - t0 )) s"
}
same() {  # same A B: the generated tokens of two runs are identical
  if cmp -s "$out/$1.tokens" "$out/$2.tokens"; then echo "tokens $1 == $2"; else echo "FAIL tokens $1 != $2"; diff "$out/$1.tokens" "$out/$2.tokens" || true; fail=1; fi
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# --- x86-64 ---
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tandem tandem_tests >/dev/null
bin=./build/bin/tandem tests=./build/bin/tandem_tests
python3 tests/check_isa_leaks.py build/bin/tandem build/bin/tandem_tests || fail=1
levels=$(./build/bin/tandem_tests --gtest_filter=Cpu.EverySupportedLevelHasAKernelTable 2>/dev/null | sed -n 's/.*supported: //p')
for l in $levels; do filter=$NATIVE_FILTER run "native-$l" "$l" env TANDEM_CPU=$l; done
run qemu64 scalar qemu-x86_64 -cpu qemu64
run haswell avx2 qemu-x86_64 -cpu Haswell
same qemu64 native-scalar
same haswell native-avx2

# --- AArch64 (cross-compiled, emulated) ---
if [ "$ARM" = 1 ]; then
  cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DTANDEM_SERVER_TESTS=OFF >/dev/null
  cmake --build build-arm64 --target tandem tandem_tests >/dev/null
  python3 tests/check_isa_leaks.py --objdump aarch64-linux-gnu-objdump build-arm64/bin/tandem build-arm64/bin/tandem_tests || fail=1
  bin=./build-arm64/bin/tandem tests=./build-arm64/bin/tandem_tests
  run a72 neon qemu-aarch64 -cpu cortex-a72
  run max i8mm qemu-aarch64 -cpu max
  filter=$KERNELS run max-dotprod dotprod env TANDEM_CPU=dotprod qemu-aarch64 -cpu max
  same a72 max
  same a72 max-dotprod
fi

echo "CPU matrix: $(( $(date +%s) - start )) s, $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
