#!/usr/bin/env bash
# The CPU matrix: what depends on the CPU, on every SIMD level this machine has (forced with TANDEM_CPU) and on
# CPUs it is not (user-mode emulation):
#   x86-64 (build/):                qemu-x86_64 -cpu qemu64 -> scalar,  -cpu Haswell -> avx2
#   AArch64 (build-arm64/, cross):  qemu-aarch64 -cpu cortex-a72 -> neon,  -cpu max -> i8mm (and dotprod, forced)
# What depends on the CPU: the dispatch (TANDEM_EXPECT_CPU: a CPU that gets another level than expected fails in
# Cpu.DispatchedLevelIsTheExpectedOne), every kernel against its scalar reference at every level the CPU has
# (Quant.*), the reference agreement of the test models (one per weight type and the MoE / MXFP4 / sink paths),
# batched and tree passes against one token at a time (Session.*), a `tandem generate` per weight type whose
# tokens must equal those of the same level run natively (x86) or of the other ARM levels (whose integer sums are
# exact and float order identical), and the static check that no instruction of a level leaks into another
# level's code (tests/check_isa_leaks.py; it is what keeps older CPUs free of SIGILL).
# The rules that do not depend on the CPU (speculative identity matrices, distribution tests, trees, grammars) run
# once, natively, in the main suite (scripts/test.sh); --full runs them on every level and CPU as well.
#
#   bash scripts/test-cpus.sh            the per-submission matrix (CI): ~7 min on 2 cores, the AArch64 cross build included
#   bash scripts/test-cpus.sh --full     also the speculative, tree and proposer-list suites on every level and
#                                        emulated CPU (~45 min): run it after any change under src/backend/cpu/, src/quant/
#                                        or a forward pass
#   --no-arm                             without the AArch64 part (either mode)
# Needs qemu-user and, for AArch64, g++-aarch64-linux-gnu and the arm64 -dev packages (scripts/install-deps.sh --cpus).
# Reuses build/ when it is configured (.ci/run builds it once for the main suite).
# Levels that neither this CPU nor qemu-user can run (AVX-512, AVX-512 VNNI and AVX-VNNI without native support:
# qemu's user mode emulates none of them) are printed as "not tested here" at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${TANDEM_SHARED_DIR:-../shared}
ARM=1 FULL=0
for a in "$@"; do
  case "$a" in
    --no-arm) ARM=0 ;;
    --full) FULL=1 ;;
    *) echo "unknown argument: $a (use --full, --no-arm)" >&2; exit 2 ;;
  esac
done
start=$(date +%s)
fail=0

# Test subsets (gtest filters). Tests that spawn the tandem binary are left out everywhere: a cross-built one cannot
# run without binfmt_misc, which CI machines may lack.
# Emulated CPUs (~50x slower than native): the kernels, dispatch, reference agreement of every weight type and of
# the MoE and MXFP4/sink models, the attention tiles, and the batched / repacked passes.
EMU='Cpu.*:Quant.*:Attention.*:Reference.*:AllSynth/*:AllModern/*qwen3moe*:AllModern/*gptoss*'
EMU+=':Session.BatchedLogitsEqualOneTokenAtATime:Session.DecodeBatchOfSeveralSessionsEqualsSeparateDecodes'
EMU+=':Session.RepackedWeightsGiveTheSameLogits'
# (token trees under emulation: Attention.OneTokenBatchTreeAndThreadCountAreBitIdentical, bit for bit against a
# chain; the model-level tree test runs at every native level)
# Forced levels on this CPU (native speed): every architecture's reference and every Session test, and the greedy
# identity of speculation in its quick form (it is where a level's batched and single-row kernels would disagree
# on a near tie).
NATIVE='Cpu.*:Quant.*:Attention.*:Reference.*:AllSynth/*:AllModern/*:AllArch/*:AllMtp/*:Depths/*4096*:Session.*:Speculative.GreedyOutputIsTokenIdenticalToPlainDecoding'
# --full: the old matrix, the speculative suites everywhere (MoE speculation, per-architecture batching and the
# tree / proposer-list distribution tests only at native speed).
FULL_NATIVE='Quant.*:Cpu.*:Attention.*:Reference.*:AllSynth/*:AllModern/*:AllArch/*:AllMtp/*:Depths/*:Speculative.*:Session.*-Speculative.IncompatiblePairsAreRefused'
FULL_EMU='Quant.*:Cpu.*:Attention.*:Reference.*:AllSynth/*:AllModern/*qwen3moe*:AllModern/*gptoss*:Speculative.*:Session.*-Speculative.IncompatiblePairsAreRefused:Speculative.Moe*:Session.EveryArchitecture*:Speculative.TokenTreeSampling*:Speculative.ProposerList*'
# The emulated Haswell leaves out the teacher-forced references of the F16/BF16 files and of gpt-oss (F16 attention,
# MXFP4 experts): qemu converts halves in software, which made them half of the matrix (130 of 243 s). Their avx2
# paths stay checked natively (the forced avx2 level runs every reference), against the scalar reference under
# emulation (Quant.*), and end to end under emulation by the generate run of each of those files, whose tokens must
# equal the native avx2 level's.
EMU_HASWELL="$EMU-AllSynth/*_f16:AllSynth/*_bf16:AllModern/*gptoss*"
# Extra forced level on an emulated CPU: the kernels (every level the CPU has) and the reference agreement.
KERNELS='Quant.*:Cpu.*:Attention.TileKernel*:Attention.CacheTiles*:AllSynth/*'
if [ "$FULL" = 1 ]; then EMU=$FULL_EMU EMU_HASWELL=$FULL_EMU NATIVE=$FULL_NATIVE; fi
export TANDEM_TEST_QUICK=1  # the speculative identity tests' reduced matrices (they print so)
# One model per weight type: F32, Q8_0, Q4_0, Q4_K_M (with Q6_K), Q5_K_M, F16, BF16, MXFP4 (with F16).
MODELS="models/stories260K models/synth-llama-spm-q8_0 models/synth-llama-spm-q4_0 models/synth-llama-spm-q4_k_m
  models/synth-llama-spm-q5_k_m models/synth-llama3ish-gpt2bpe-f16 models/synth-qwen2-gpt2bpe-bf16
  models-modern/synth-gptoss-spm-f16-mxfp4"

# run LABEL EXPECTED_LEVEL FILTER RUNNER... : the test subset, then generate per model; the tokens go to
# $out/LABEL.tokens.
run() {
  local label=$1 level=$2 filter=$3; shift 3
  # the GPU's tests (the OnTheGpu references, Gpu.*, Vulkan.*) do not depend on the CPU's level: test.sh runs them
  case $filter in *-*) filter+=':*OnTheGpu*:Gpu.*:Vulkan.*' ;; *) filter+='-*OnTheGpu*:Gpu.*:Vulkan.*' ;; esac
  local t0; t0=$(date +%s)
  if ! TANDEM_EXPECT_CPU=$level "$@" "$tests" --gtest_filter="$filter" --gtest_brief=1 > "$out/$label.log" 2>&1; then
    echo "FAIL $label: tests (log below)"; tail -n 30 "$out/$label.log"; fail=1
  fi
  : > "$out/$label.tokens"
  for m in $MODELS; do
    if ! TANDEM_EXPECT_CPU=$level "$@" "$bin" generate -m "$SHARED/$m.gguf" -p "Once upon a time" -n 8 --temp 0 --json \
        2>"$out/$label.$(basename "$m").err" | python3 -c "import json,sys; print('$m', json.load(sys.stdin)['tokens'])" >> "$out/$label.tokens"; then
      echo "FAIL $label: generate $m"; tail -n 5 "$out/$label.$(basename "$m").err"; fail=1
    fi
  done
  local ran; ran=$(grep -Eo '[0-9]+ tests? from [0-9]+ test suites? ran' "$out/$label.log" | head -1 || true)
  echo "$label ($level): $(grep -c '' "$out/$label.tokens") models generated, tests ${ran:-(none ran)}, $(( $(date +%s) - t0 )) s"
  [ -n "$ran" ] || { echo "FAIL $label: no test ran (filter $filter)"; fail=1; }
  tested+=("$level ($label)")
}
same() {  # same A B: the generated tokens of two runs are identical
  if cmp -s "$out/$1.tokens" "$out/$2.tokens"; then echo "tokens $1 == $2"; else echo "FAIL tokens $1 != $2"; diff "$out/$1.tokens" "$out/$2.tokens" || true; fail=1; fi
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The tests' random-weight models (test::synth_file) are written once, by the first native run, and read by every
# later run: generating them under emulation took most of the emulated Haswell's time (glibc's FMA paths of
# logf/sinf/cosf run in qemu's software floating point).
export TANDEM_TEST_SYNTH_CACHE="$out/synth"
tested=()

# --- x86-64 ---
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tandem tandem_tests >/dev/null
bin=./build/bin/tandem tests=./build/bin/tandem_tests
python3 tests/check_isa_leaks.py build/bin/tandem build/bin/tandem_tests || fail=1
levels=$(./build/bin/tandem_tests --gtest_filter=Cpu.EverySupportedLevelHasAKernelTable 2>/dev/null | sed -n 's/.*supported: //p')
best=${levels##* }
for l in $levels; do
  # the best level is the one the main suite (scripts/test.sh) runs at: here only its dispatch and the generated
  # tokens the emulated CPU of that level must equal (unless --full)
  if [ "$l" = "$best" ] && [ "$FULL" = 0 ]; then
    run "native-$l" "$l" 'Cpu.*' env TANDEM_CPU="$l"
  else
    run "native-$l" "$l" "$NATIVE" env TANDEM_CPU="$l"
  fi
done
run qemu64 scalar "$EMU" qemu-x86_64 -cpu qemu64
run haswell avx2 "$EMU_HASWELL" qemu-x86_64 -cpu Haswell
same qemu64 native-scalar
same haswell native-avx2

# --- AArch64 (cross-compiled, emulated) ---
if [ "$ARM" = 1 ]; then
  t0=$(date +%s)
  [ -f build-arm64/build.ninja ] || cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DTANDEM_SERVER=OFF -DTANDEM_UNITY=ON -DTANDEM_MPI=OFF -DTANDEM_VULKAN=OFF >/dev/null
  cmake --build build-arm64 --target tandem tandem_tests >/dev/null
  echo "AArch64 cross build: $(( $(date +%s) - t0 )) s"
  python3 tests/check_isa_leaks.py --objdump aarch64-linux-gnu-objdump build-arm64/bin/tandem build-arm64/bin/tandem_tests || fail=1
  bin=./build-arm64/bin/tandem tests=./build-arm64/bin/tandem_tests
  run a72 neon "$EMU" qemu-aarch64 -cpu cortex-a72
  run max i8mm "$EMU" qemu-aarch64 -cpu max
  run max-dotprod dotprod "$KERNELS" env TANDEM_CPU=dotprod qemu-aarch64 -cpu max
  same a72 max
  same a72 max-dotprod
fi

# Which levels this run tested, and which it could not (no native support, and qemu-user has no AVX-512/VNNI).
all_levels="scalar avx2 avx512 avxvnni avx512vnni neon dotprod i8mm"
untested=""
for l in $all_levels; do
  case " ${tested[*]} " in *" $l ("*) ;; *) untested+=" $l" ;; esac
done
echo "levels tested: ${tested[*]}"
echo "levels not tested here:${untested:- none}"
if [ -n "${TANDEM_CI_NOTES:-}" ]; then  # for .ci/run's table
  echo "  SIMD levels tested: ${tested[*]}" >> "$TANDEM_CI_NOTES"
  echo "  SIMD levels not tested on this machine:${untested:- none}" >> "$TANDEM_CI_NOTES"
fi
echo "CPU matrix$([ "$FULL" = 1 ] && echo ' (--full)'): $(( $(date +%s) - start )) s, $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
