#!/usr/bin/env bash
# tandem on a GPU beside llama.cpp's Vulkan backend, on one machine, interleaved: the prepared script for a lent GPU
# (issue 48). Builds tandem (Vulkan) and, where it can, llama.cpp 2026-09's llama-bench and llama-speculative with
# GGML_VULKAN; writes random-weight models of real shapes (`tandem synth`: speed does not depend on the values); then
# ROUNDS rounds of, per model, tandem then llama.cpp (the order alternating):
#   tg N and pp P (tandem bench / llama-bench, -ngl 99), tandem's verification passes vb1..vb16;
#   the seeds' command: an 8B-shape target and a 1B-shape draft, -ngl 99 -ngld 99 --draft-max 16 --draft-min 4,
#   greedy, against the same target alone (tandem generate; llama-speculative / llama-cli where built).
# Prints every raw table into OUT (default /tmp/tandem-gpu-bench) and a summary of medians at the end.
#   bash bench/gpu.sh                 the full set (tinyllama-1.1b and llama-3.1-8b; Q8_0, Q4_0, Q4_K_M)
#   SHAPES=tiny-test TYPES=Q8_0 ROUNDS=1 P=64 N=16 bash bench/gpu.sh      a dry run (lavapipe: correctness only)
# Env: TANDEM_BIN (a built tandem: no build), SHAPES, TYPES, ROUNDS (3), P (512), N (128), VB (1,2,4,8,16), DEVICE (0), OUT, LLAMACPP_SRC (a llama.cpp
# tree; else scripts/llama-source.sh gets one from npm, which needs the registry), SKIP_LLAMA=1, SPEC_TARGET /
# SPEC_DRAFT (shapes of the seeds' pair: llama-3.1-8b / llama-3.2-1b, Q8_0). A Vulkan loader and driver must be
# installed (the device tool's README: the loader's .deb files and VK_DRIVER_FILES for NVIDIA's ICD).
set -uo pipefail
cd "$(dirname "$0")/.."
SHAPES=${SHAPES:-"tinyllama-1.1b llama-3.1-8b"} TYPES=${TYPES:-"Q8_0 Q4_0 Q4_K_M"} ROUNDS=${ROUNDS:-3}
P=${P:-512} N=${N:-128} VB=${VB:-1,2,4,8,16} DEVICE=${DEVICE:-0} OUT=${OUT:-/tmp/tandem-gpu-bench}
SPEC_TARGET=${SPEC_TARGET:-llama-3.1-8b} SPEC_DRAFT=${SPEC_DRAFT:-llama-3.2-1b} SPEC_N=${SPEC_N:-256}
jobs=$(nproc)
mkdir -p "$OUT/models" "$OUT/raw"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt"; }

if [ -n "${TANDEM_BIN:-}" ]; then T=$TANDEM_BIN
else
log "build tandem (Vulkan)"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_UNITY=ON -DTANDEM_VULKAN=ON \
  -DTANDEM_SERVER=OFF -DTANDEM_MPI=OFF >/dev/null && cmake --build build-gpu --target tandem -j "$jobs" >"$OUT/build-tandem.log" 2>&1 \
  || { log "tandem build failed: $OUT/build-tandem.log"; exit 1; }
T=$PWD/build-gpu/bin/tandem
fi
"$T" --list-devices | tee -a "$OUT/log.txt"

L=""
if [ "${SKIP_LLAMA:-0}" != 1 ]; then
  if src=$(bash scripts/llama-source.sh "$OUT/llama-src" 2>>"$OUT/log.txt"); then
    log "build llama.cpp (GGML_VULKAN) from $src"
    if cmake -S "$src" -B "$OUT/llama-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >"$OUT/build-llama.log" 2>&1 &&
      cmake --build "$OUT/llama-build" --target llama-bench llama-speculative llama-cli -j "$jobs" >>"$OUT/build-llama.log" 2>&1; then
      L=$OUT/llama-build/bin
    else log "llama.cpp's Vulkan build failed ($OUT/build-llama.log): tandem alone"; fi
  else log "no llama.cpp source: tandem alone"; fi
fi

model() {  # model SHAPE TYPE -> path
  local f="$OUT/models/$1-$2.gguf"
  [ -f "$f" ] || "$T" synth "$f" --shape "$1" --type "$2" >/dev/null 2>&1 || { log "synth $1 $2 failed"; return 1; }
  echo "$f"
}

for r in $(seq "$ROUNDS"); do
  for s in $SHAPES; do
    for ty in $TYPES; do
      m=$(model "$s" "$ty") || continue
      b=$(basename "$m" .gguf)
      order="tandem llama"; [ $((r % 2)) = 0 ] && order="llama tandem"
      for who in $order; do
        if [ "$who" = tandem ]; then
          log "round $r $b: tandem bench"
          "$T" bench -m "$m" -ngl 99 -dev "$DEVICE" -p "$P" -n "$N" --vb "$VB" -r 1 --json \
            >"$OUT/raw/$b.tandem.$r.json" 2>>"$OUT/raw/$b.tandem.$r.err" || log "tandem bench $b failed"
        elif [ -n "$L" ]; then
          log "round $r $b: llama-bench"
          "$L/llama-bench" -m "$m" -ngl 99 -mg "$DEVICE" -p "$P" -n "$N" -r 1 -o json \
            >"$OUT/raw/$b.llama.$r.json" 2>>"$OUT/raw/$b.llama.$r.err" || log "llama-bench $b failed"
        fi
      done
    done
  done
  # the seeds' command: target + draft on the GPU, greedy, against the target alone
  tm=$(model "$SPEC_TARGET" Q8_0) && dm=$(model "$SPEC_DRAFT" Q8_0) && {
    for who in tandem llama; do
      if [ "$who" = tandem ]; then
        log "round $r seeds: tandem generate plain / speculative"
        "$T" generate -m "$tm" -p "Once upon a time" -n "$SPEC_N" --temp 0 -c 4096 -ngl 99 --ignore-eos --json \
          >"$OUT/raw/seeds.tandem.plain.$r.json" 2>>"$OUT/raw/seeds.tandem.err"
        "$T" generate -m "$tm" -md "$dm" -p "Once upon a time" -n "$SPEC_N" --temp 0 -c 4096 -cd 4096 -ngl 99 -ngld 99 \
          --draft-max 16 --draft-min 4 --ignore-eos --json >"$OUT/raw/seeds.tandem.spec.$r.json" 2>>"$OUT/raw/seeds.tandem.err"
      elif [ -n "$L" ]; then
        log "round $r seeds: llama-speculative"
        "$L/llama-speculative" -m "$tm" -md "$dm" -p "Once upon a time" -n "$SPEC_N" --temp 0 -c 4096 -cd 4096 -ngl 99 \
          -ngld 99 --draft-max 16 --draft-min 4 --ignore-eos >"$OUT/raw/seeds.llama.spec.$r.txt" 2>&1
      fi
    done
  }
done

python3 - "$OUT" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
def med(xs): return statistics.median(xs) if xs else float('nan')
print(f"\n{'model':28} {'test':8} {'tandem t/s':>11} {'llama.cpp t/s':>14} {'ratio':>7}")
models = sorted({os.path.basename(f).split('.tandem.')[0] for f in glob.glob(f"{out}/raw/*.tandem.*.json") if 'seeds' not in f})
for b in models:
    t = {}
    for f in glob.glob(f"{out}/raw/{b}.tandem.*.json"):
        try:
            for e in json.load(open(f)):
                if 'avg_ts' in e: t.setdefault(e['test'], []).append(e['avg_ts'])
        except Exception: pass
    l = {}
    for f in glob.glob(f"{out}/raw/{b}.llama.*.json"):
        try:
            for e in json.load(open(f)):
                k = f"pp{e['n_prompt']}" if e.get('n_prompt') else f"tg{e['n_gen']}"
                l.setdefault(k, []).append(e['avg_ts'])
        except Exception: pass
    for k in sorted(set(t) | set(l)):
        a, c = med(t.get(k, [])), med(l.get(k, []))
        print(f"{b:28} {k:8} {a:11.2f} {c:14.2f} {a / c if c == c and c else float('nan'):7.2f}")
def gen_tps(pattern):
    v = []
    for f in glob.glob(f"{out}/raw/{pattern}"):
        try:
            j = json.load(open(f)); v.append(j['timings']['predicted_per_second'] if 'timings' in j else j['tokens_per_second'])
        except Exception: pass
    return med(v)
plain, spec = gen_tps('seeds.tandem.plain.*.json'), gen_tps('seeds.tandem.spec.*.json')
ls = []
for f in glob.glob(f"{out}/raw/seeds.llama.spec.*.txt"):
    m = re.search(r'decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s', open(f).read())
    if m: ls.append(float(m.group(1)))
print(f"\nseeds' pair: tandem plain {plain:.1f} t/s, speculative {spec:.1f} t/s ({spec / plain:.2f}x); llama-speculative {med(ls):.1f} t/s")
PY
