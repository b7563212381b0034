#!/usr/bin/env bash
# Token output of two tandem binaries, side by side: the check that a restructuring changed no output.
#   bash bench/compare_outputs.sh OLD_TANDEM NEW_TANDEM [WORKDIR]
# Runs `tandem generate` on stories260K, the shared synth files and a tiny random-weight model of every
# architecture (`tandem synth`, made once by the OLD binary into WORKDIR/models), greedy and seeded sampled, plain
# and with each drafter kind (draft model, self, n-gram, suffix, MTP, EAGLE-3, Gemma 4 assistant, a token tree),
# each KV cache type, and over 2 MPI ranks (layer and tensor split) when mpirun is there. Every case's stdout
# (the generated text) of the two binaries must be equal; a table of cases ends the run, and the exit status is
# the number of cases that differ or failed on either side.
set -uo pipefail
old=$1 new=$2 work=${3:-/tmp/tandem-compare}
shared=${TANDEM_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
mkdir -p "$work/models" "$work/out"
m=$work/models
shapes="tiny-ref-llama tiny-ref-eagle3 tiny-ref-qwen3 tiny-test-qwen3moe tiny-test-gemma3 tiny-test-phi3
  tiny-test-gptoss tiny-ref-smollm3 tiny-ref-granite tiny-ref-olmo2 tiny-ref-mistral3 tiny-ref-glm4moe
  tiny-ref-deepseek2 tiny-ref-llama4 tiny-ref-gemma4 tiny-ref-gemma4moe tiny-ref-gemma4-assistant tiny-ref-qwen35
  tiny-ref-qwen35moe tiny-ref-qwen3next"
for s in $shapes; do
  [ -f "$m/$s.gguf" ] || "$old" synth "$m/$s.gguf" --shape "$s" --type Q8_0 >/dev/null 2>&1 || echo "synth $s failed"
done

cases=()
add() { cases+=("$*"); }  # add NAME ARGS...
p='-p "Once upon a time, in a small town by the sea" -n 24 -t 2'
# drafters forced to draft every round (the adaptive controller finds random-weight drafts not worth it)
d='--draft-adaptive off --draft-p-min 0 --draft-max 6 --draft-min 1'
for f in "$shared/models/"*.gguf "$shared/models-modern/"*.gguf; do
  b=$(basename "$f" .gguf)
  add "$b.greedy" -m "$f" $p --temp 0
  add "$b.sampled" -m "$f" $p --temp 1.0 -s 7
done
for s in $shapes; do
  case $s in *eagle3|*assistant) continue ;; esac
  add "$s.greedy" -m "$m/$s.gguf" $p --temp 0
  add "$s.sampled" -m "$m/$s.gguf" $p --temp 1.0 -s 7
  add "$s.ngram" -m "$m/$s.gguf" $p --temp 0 --spec-type ngram
  add "$s.self" -m "$m/$s.gguf" $p --temp 0.7 -s 9 --spec-type self --draft-layers 1 $d
done
st=$shared/models/stories260K.gguf
q8=$shared/models/synth-llama-spm-q8_0.gguf
add stories.draft -m "$st" $p --temp 0 -md "$st" $d
add stories.draft-sampled -m "$st" $p --temp 0.9 -s 3 -md "$st" $d
add stories.tree -m "$st" $p --temp 0 -md "$st" --spec-tree on --spec-tree-width 3 --spec-tree-nodes 12 $d
add stories.self -m "$st" $p --temp 0 --spec-type self --draft-layers 2 $d
add stories.suffix -m "$st" $p --temp 0 --spec-type suffix
add q8.draft-q4 -m "$q8" $p --temp 0 -md "$shared/models/synth-llama-spm-q4_0.gguf" $d
add glm4moe.mtp -m "$m/tiny-ref-glm4moe.gguf" $p --temp 0 --spec-type mtp $d
add deepseek2.mtp -m "$m/tiny-ref-deepseek2.gguf" $p --temp 0.8 -s 5 --spec-type mtp $d
add llama.eagle3 -m "$m/tiny-ref-llama.gguf" $p --temp 0 -md "$m/tiny-ref-eagle3.gguf" $d
add qwen35.mtp -m "$m/tiny-ref-qwen35.gguf" $p --temp 0 --spec-type mtp $d
add qwen3moe.draft-tree -m "$m/tiny-test-qwen3moe.gguf" $p --temp 0 -md "$m/tiny-test-qwen3moe.gguf" --spec-tree on $d
add gemma4.assistant -m "$m/tiny-ref-gemma4.gguf" $p --temp 0 -md "$m/tiny-ref-gemma4-assistant.gguf" $d
for t in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl; do
  add "q8.kv-$t" -m "$q8" $p --temp 0 -ctk "$t" -ctv "$t"
done

run_one() {  # run_one BIN NAME ARGS... -> $work/out/NAME.BIN_TAG
  local bin=$1 tag=$2 name=$3; shift 3
  eval "\"$bin\" generate $* --no-display-prompt" >"$work/out/$name.$tag" 2>"$work/out/$name.$tag.err"
}
differ=0 n=0
for c in "${cases[@]}"; do
  read -r name args <<<"$c"
  run_one "$old" old "$name" "$args"; ro=$?
  run_one "$new" new "$name" "$args"; rn=$?
  n=$((n + 1))
  if [ $ro -ne 0 ] || [ $rn -ne 0 ]; then
    echo "FAILED  $name (exit old $ro, new $rn): $(tail -n 1 "$work/out/$name.new.err")"; differ=$((differ + 1))
  elif ! cmp -s "$work/out/$name.old" "$work/out/$name.new"; then
    echo "DIFFERS $name"; differ=$((differ + 1))
  else
    echo "same    $name ($(wc -c <"$work/out/$name.new") bytes; $(grep -ho '[0-9]* with a draft' "$work/out/$name.new.err" | head -n 1))"
  fi
done
if command -v mpirun >/dev/null; then
  for mode in layer tensor; do
    for tag in old new; do
      bin=$old; [ $tag = new ] && bin=$new
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" generate -m "$st" -p "Once upon a time" \
        -n 24 --temp 0 -sm $mode --no-display-prompt >"$work/out/split-$mode.$tag" 2>"$work/out/split-$mode.$tag.err"
    done
    n=$((n + 1))
    if cmp -s "$work/out/split-$mode.old" "$work/out/split-$mode.new" && [ -s "$work/out/split-$mode.new" ]; then
      echo "same    split-$mode (2 ranks)"
    else
      echo "DIFFERS split-$mode (2 ranks)"; differ=$((differ + 1))
    fi
  done
fi
echo "$n cases, $differ differ or failed"
exit "$differ"
