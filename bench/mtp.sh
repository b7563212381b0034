#!/usr/bin/env bash
# MTP speculation (the model's own multi-token-prediction block drafts) in tandem and in llama.cpp
# (llama-speculative-simple --spec-type draft-mtp), one after the other on the same file: greedy, a fixed draft of
# K tokens per round (tandem: --draft-adaptive off, no trees, no p-min cut-off, as llama.cpp drafts), N tokens after
# a short prompt. Random weights (`tandem synth`), so the drafts are rejected: what this shows is the cost of a
# round whose drafts all fail (one MTP pass per drafted token, one verification pass of K + 1 rows, the rollback),
# and that each engine's speculative output is its own plain output. tandem's default (the adaptive controller)
# is run too: it stops drafting when drafts do not pay. Both engines at AVX2, 2 threads.
# DRAFT=assistant: the drafter is the shape's Gemma 4 assistant (SHAPE-assistant, `-md` in both engines; llama.cpp's
# draft-mtp), e.g. SHAPES=gemma4-e2b DRAFT=assistant. DRAFT=<shape>: a small draft model of that synth shape (the
# same vocabulary; llama.cpp's draft-simple), e.g. SHAPES=llama4-scout-4l DRAFT=llama4-draft.
#   LLAMA_BIN=/path/to/llama.cpp/build/bin MODELS=/tmp/archbench [SHAPES="qwen3.5-9b"] bash bench/mtp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/bin/tandem
MODELS=${MODELS:-/tmp/archbench}
N=${N:-48} K=${K:-4}
: "${LLAMA_BIN:?set LLAMA_BIN to the build/bin of llama.cpp (llama-completion, llama-speculative-simple)}"
PROMPT="Once upon a time"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ids() { grep -oE '\bt[0-9]+\b' "$1" | tr '\n' ' '; }  # the synth vocabulary's pieces are t<id>
for s in ${SHAPES:-qwen3.5-35b-a3b-8l qwen3.5-9b}; do
  f=$MODELS/$s-q4_0.gguf
  [ -f "$f" ] || $T synth "$f" --shape "$s" --type Q4_0
  drafter=(--spec-type mtp) ll_drafter=(--spec-type draft-mtp) label=MTP
  if [ -n "${DRAFT:-}" ]; then
    d=$DRAFT ll_type=draft-simple label="draft $DRAFT"
    if [ "$d" = assistant ]; then d=$s-assistant ll_type=draft-mtp label="its assistant"; fi
    a=$MODELS/$d-q4_0.gguf
    [ -f "$a" ] || $T synth "$a" --shape "$d" --type Q4_0
    drafter=(-md "$a") ll_drafter=(-md "$a" --spec-type "$ll_type")
  fi
  echo "## $s Q4_0, greedy, $N tokens, draft $K per round ($label)"
  common=(-m "$f" -p "$PROMPT" -n "$N" --temp 0 -t 2 -c 512 --json)
  TANDEM_CPU=avx2 $T generate "${common[@]}" --spec-type none > "$out/plain.json" 2>/dev/null
  TANDEM_CPU=avx2 $T generate "${common[@]}" "${drafter[@]}" --draft-max "$K" --draft-p-min 0 \
    --draft-adaptive off --spec-tree off > "$out/mtp.json" 2>/dev/null
  TANDEM_CPU=avx2 $T generate "${common[@]}" "${drafter[@]}" > "$out/auto.json" 2>/dev/null
  python3 - "$out" <<'EOF'
import json, sys
d = sys.argv[1]
r = {k: json.load(open(f"{d}/{k}.json")) for k in ("plain", "mtp", "auto")}
base = r["plain"]["tokens"]
for k, label in (("plain", "plain"), ("mtp", "speculative, fixed draft"), ("auto", "speculative, adaptive (default)")):
    j = r[k]
    t = j["timings"]
    sp = j.get("spec", {})
    extra = ""
    if sp and sp.get("n_rounds_drafted", 0) > 0:
        rounds = sp["n_rounds_drafted"]
        extra = (f", drafted {sp['n_drafted']} in {rounds} rounds, accepted {sp['n_accept']}; per round: draft "
                 f"{sp['t_draft_ms'] / rounds:.1f} ms, target {sp['t_target_ms'] / max(1, sp['n_rounds']):.1f} ms")
    elif sp:
        extra = ", drafted nothing (at the pass costs it measured or remembered, no draft length pays without acceptance)"
    same = "same tokens as plain" if j["tokens"] == base else "TOKENS DIFFER FROM PLAIN"
    print(f"tandem {label}: {t['predicted_per_second']:.2f} t/s{extra}; {same}")
EOF
  "$LLAMA_BIN/llama-completion" -m "$f" -p "$PROMPT" -n "$N" --temp 0 -t 2 -c 512 -no-cnv --no-warmup \
    > "$out/ll-plain.txt" 2> "$out/ll-plain.err" < /dev/null
  "$LLAMA_BIN/llama-speculative-simple" -m "$f" "${ll_drafter[@]}" -p "$PROMPT" -n "$N" --temp 0 -t 2 -c 512 \
    --spec-draft-n-max "$K" > "$out/ll-mtp.txt" 2>&1 < /dev/null
  plain_tps=$(grep -oE 'eval time = .*runs.*\( *[0-9.]+ ms per token, *[0-9.]+ tokens per second' "$out/ll-plain.err" |
    grep -v prompt | grep -oE '[0-9.]+ tokens per second' | grep -oE '^[0-9.]+' | tail -1)
  mtp_tps=$(grep -oE 'decoded +[0-9]+ tokens in +[0-9.]+ seconds, speed: +[0-9.]+' "$out/ll-mtp.txt" | grep -oE '[0-9.]+$')
  drafted=$(grep -oE 'n_drafted *= *[0-9]+' "$out/ll-mtp.txt" | grep -oE '[0-9]+$')
  accepted=$(grep -oE 'n_accept *= *[0-9]+' "$out/ll-mtp.txt" | grep -oE '[0-9]+$')
  a=$(ids "$out/ll-plain.txt" | cut -d' ' -f1-"$N") b=$(ids "$out/ll-mtp.txt" | cut -d' ' -f1-"$N")
  same=$([ -n "$a" ] && [ "$a" = "$b" ] && echo "same tokens as plain" || echo "TOKENS DIFFER FROM PLAIN")
  echo "llama.cpp plain: ${plain_tps:-?} t/s"
  echo "llama.cpp speculative ($label), fixed draft: ${mtp_tps:-?} t/s, drafted ${drafted:-?}, accepted ${accepted:-?}; $same"
  echo
done
