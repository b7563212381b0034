#!/usr/bin/env bash
# A model split across MPI ranks, as users start it: mpirun on this host (--oversubscribe, one thread per rank).
#   - greedy output of 2 and 3 ranks token-identical to one process: stories260K, the synth llama (Q8_0, Q4_K_M) and
#     qwen2 (BF16) files, a mixture of experts (qwen3moe) and gpt-oss (sinks, MXFP4);
#   - speculation across ranks (a draft model, n-grams, a fixed draft length) equal to one process's plain output,
#     and a sampled run equal to one process's with the same seed;
#   - the tensor split (-sm tensor): greedy identity where the files' margins allow, speculative = plain on the same
#     ranks, a run repeating, more ranks than KV heads refused;
#   - a split server (both modes) answering what one process generates, then stopping cleanly on SIGTERM to rank 0;
#   - faults: a rank with another model file refused by name; a rank killed mid-generation ending the run non-zero
#     with the rank named; a server whose rank stalls past --rank-timeout answering 503 and exiting non-zero; a
#     server whose rank is killed answering 503 / an error event at once, whatever the rank timeout.
# Needs mpirun (Open MPI: scripts/install-deps.sh) and a tandem built with TANDEM_MPI.
#   bash tests/split/run.sh [path/to/tandem]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-${TANDEM_BIN:-build/bin/tandem}}
SHARED=${TANDEM_SHARED_DIR:-../shared}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader,tcp)
command -v mpirun >/dev/null || { echo "FAIL: mpirun not found (scripts/install-deps.sh installs Open MPI)"; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
t0=$(date +%s)

P="Once upon a time"
gen() {  # gen OUT NP MODEL ARGS...: one process (NP 1) or NP ranks
  local out=$1 np=$2 model=$3; shift 3
  if [ "$np" = 1 ]; then "$BIN" generate -m "$model" -p "$P" -t 1 "$@" >"$out" 2>"$out.err"
  else "${MPIRUN[@]}" -np "$np" "$BIN" generate -m "$model" -p "$P" -t 1 "$@" >"$out" 2>"$out.err"; fi
}
same() {  # same LABEL NP MODEL ARGS...: NP ranks print what one process prints
  local label=$1 np=$2 model=$3; shift 3
  gen "$work/one" 1 "$model" "$@" || { fail "$label: one process failed: $(tail -2 "$work/one.err")"; return; }
  if ! gen "$work/split" "$np" "$model" "$@"; then fail "$label: $np ranks failed: $(grep -i error "$work/split.err" | head -3)"; return; fi
  if cmp -s "$work/one" "$work/split" && [ -s "$work/one" ]; then pass "$label: $np ranks = one process ($(grep -o 'rank 0 sent.*' "$work/split.err"))"
  else fail "$label: $np ranks differ from one process"; diff <(head -c 400 "$work/one") <(head -c 400 "$work/split") | head -6; fi
}

# Greedy identity
for np in 2 3; do
  same "stories260K greedy" $np "$SHARED/models/stories260K.gguf" -n 64 --temp 0
  same "synth llama Q8_0 greedy" $np "$SHARED/models/synth-llama-spm-q8_0.gguf" -n 48 --temp 0
done
same "synth llama Q4_K_M greedy" 2 "$SHARED/models/synth-llama-spm-q4_k_m.gguf" -n 48 --temp 0
same "synth qwen2 BF16 greedy" 2 "$SHARED/models/synth-qwen2-gpt2bpe-bf16.gguf" -n 48 --temp 0
same "synth qwen3moe greedy" 2 "$SHARED/models-modern/synth-qwen3moe-spm-q8_0.gguf" -n 48 --temp 0
same "synth gpt-oss greedy" 2 "$SHARED/models-modern/synth-gptoss-spm-f16-mxfp4.gguf" -n 32 --temp 0

# Speculation across ranks: the draft runs on rank 0, verification passes go through the ranks
M=$SHARED/models/stories260K.gguf
gen "$work/plain" 1 "$M" -n 64 --temp 0
for spec in "-md $M --draft-adaptive off --draft-max 4 --draft-p-min 0" "--spec-type ngram" "--spec-type self"; do
  # shellcheck disable=SC2086
  if gen "$work/spec" 3 "$M" -n 64 --temp 0 $spec && cmp -s "$work/plain" "$work/spec"; then
    pass "speculative [$spec] on 3 ranks = one process's plain output ($(grep -E '^n_accept' "$work/spec.err" | tr -s ' '), $(grep -o 'rank 0 sent.*' "$work/spec.err"))"
  else fail "speculative [$spec] on 3 ranks differs from plain decoding: $(grep -i error "$work/spec.err" | head -2)"; fi
done
# (a fixed draft length: the adaptive controller prices passes by wall time, so under load it drafts otherwise and
# the sampler draws its numbers in another order)
same "sampled, draft model, seed 7" 2 "$M" -n 64 --temp 0.9 -s 7 -md "$M" --draft-adaptive off --draft-max 4 --draft-p-min 0

# Tensor split: every rank runs every layer on its heads and FFN units (or experts). Its sums run in another order
# than one process's (tests/test_split.cpp holds the logits to the reference tolerances): greedy output equals one
# process's where no near-tie flips (these files), and on any file speculative output equals the same ranks' plain
# output and a run repeats bit for bit.
same "tensor: stories260K greedy" 2 "$M" -n 64 --temp 0 -sm tensor
same "tensor: stories260K greedy" 3 "$M" -n 64 --temp 0 -sm tensor
same "tensor: synth llama Q8_0 greedy" 2 "$SHARED/models/synth-llama-spm-q8_0.gguf" -n 48 --temp 0 -sm tensor
same "tensor: synth qwen2 BF16 greedy" 2 "$SHARED/models/synth-qwen2-gpt2bpe-bf16.gguf" -n 48 --temp 0 -sm tensor
same "tensor: synth gpt-oss greedy" 2 "$SHARED/models-modern/synth-gptoss-spm-f16-mxfp4.gguf" -n 32 --temp 0 -sm tensor
Q=$SHARED/models-modern/synth-qwen3moe-spm-q8_0.gguf
gen "$work/tp" 2 "$Q" -n 48 --temp 0 -sm tensor
gen "$work/tp2" 2 "$Q" -n 48 --temp 0 -sm tensor
gen "$work/ts" 2 "$Q" -n 48 --temp 0 -sm tensor --spec-type ngram
if [ -s "$work/tp" ] && cmp -s "$work/tp" "$work/tp2" && cmp -s "$work/tp" "$work/ts"; then
  pass "tensor: qwen3moe (experts shared out) on 2 ranks: a run repeats, n-gram speculation = plain decoding"
else fail "tensor: qwen3moe on 2 ranks: runs differ: $(grep -i error "$work/tp.err" "$work/ts.err" | head -2)"; fi
gen "$work/tplain" 3 "$M" -n 64 --temp 0 -sm tensor
gen "$work/tspec" 3 "$M" -n 64 --temp 0 -sm tensor -md "$M" --draft-adaptive off --draft-max 4 --draft-p-min 0
if [ -s "$work/tplain" ] && cmp -s "$work/tplain" "$work/tspec"; then
  pass "tensor: speculative (draft model) on 3 ranks = the same ranks' plain output ($(grep -o 'rank 0 sent.*' "$work/tspec.err"))"
else fail "tensor: speculative on 3 ranks differs from plain: $(grep -i error "$work/tspec.err" | head -2)"; fi
"${MPIRUN[@]}" -np 3 "$BIN" generate -m "$SHARED/models/synth-llama-spm-q8_0.gguf" -p "$P" -n 4 -t 1 -sm tensor >"$work/few" 2>"$work/few.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "fewer than the 3 ranks of the tensor split" "$work/few.err"; then
  pass "tensor: more ranks than KV heads refused, exit $rc"
else fail "tensor: 3 ranks over 2 KV heads: exit $rc, $(grep -i error "$work/few.err" | head -2)"; fi
# ranks at other SIMD levels (MPMD: rank 0 held to the scalar level) round the replicated steps differently: refused
"${MPIRUN[@]}" -np 1 -x TANDEM_CPU=scalar "$BIN" generate -m "$M" -p "$P" -n 4 -t 1 -sm tensor : \
  -np 1 "$BIN" generate -m "$M" -p "$P" -n 4 -t 1 -sm tensor >"$work/lvl" 2>"$work/lvl.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1 (.*) was started with other split flags than rank 0" "$work/lvl.err"; then
  pass "tensor: ranks at other SIMD levels refused, exit $rc"
else fail "tensor: ranks at other SIMD levels: exit $rc, $(grep -i error "$work/lvl.err" | head -2)"; fi

# A rank with another file: refused by name (MPMD: rank 1 runs another -m)
"${MPIRUN[@]}" -np 1 "$BIN" generate -m "$SHARED/models/synth-llama-spm-q8_0.gguf" -p "$P" -n 4 -t 1 : \
  -np 1 "$BIN" generate -m "$SHARED/models/synth-llama-spm-q4_0.gguf" -p "$P" -n 4 -t 1 >"$work/mm" 2>"$work/mm.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1 (.*) has another model file or binary than rank 0" "$work/mm.err"; then
  pass "a rank with another file: refused, exit $rc, rank named"
else fail "a rank with another file: exit $rc, $(grep -i error "$work/mm.err" | head -2)"; fi

# rank_pid MPIRUN_PID RANK: the process of that rank (a child of mpirun on this host)
rank_pid() {
  for c in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$c"; return; fi
  done
}
wait_gone() {  # wait_gone PID SECONDS: 0 when it ended in time
  for _ in $(seq 1 $((10 * $2))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

# A rank killed mid-generation: the run ends (no hang), non-zero, naming the rank
"${MPIRUN[@]}" -np 2 "$BIN" generate -m "$M" -p "$P" -t 1 -n 4000 -c 4096 --ignore-eos >"$work/kill" 2>"$work/kill.err" &
mp=$!
pids+=("$mp")
r1=""
for _ in $(seq 1 100); do r1=$(rank_pid "$mp" 1); [ -n "$r1" ] && grep -q "layers" "$work/kill.err" && break; sleep 0.05; done
sleep 0.3
kill -STOP "$r1" 2>/dev/null  # held mid-pass, so that the kill below lands mid-generation
sleep 0.2
if grep -q "decoded" "$work/kill.err"; then fail "rank kill: the generation had finished before the kill"; fi
kill -9 "$r1"
if wait_gone "$mp" 20; then
  wait "$mp"; rc=$?
  if [ $rc -ne 0 ] && grep -qiE "rank 1.*(exited|killed|signal)" "$work/kill.err"; then
    pass "rank 1 killed mid-generation: mpirun ended in time, exit $rc, rank 1 named"
  else fail "rank 1 killed: exit $rc, $(tail -3 "$work/kill.err")"; fi
else fail "rank 1 killed: the run hung"; fi

# A split server (both modes): answers what one process generates; SIGTERM to rank 0 stops every rank cleanly
"$BIN" generate -m "$M" -p "$P" -n 40 -t 1 --temp 0 --json 2>/dev/null >"$work/ref.json"
want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['text'])" "$work/ref.json")
for sm in layer tensor; do
  port=$((20000 + RANDOM % 20000))
  "${MPIRUN[@]}" -np 2 "$BIN" serve -m "$M" -t 1 --port $port -np 2 --rank-timeout 2 -sm $sm >"$work/srv" 2>"$work/srv.err" &
  mp=$!
  pids+=("$mp")
  for _ in $(seq 1 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.1; done
  got=$(curl -s "localhost:$port/completion" -d "{\"prompt\":\"$P\",\"n_predict\":40,\"temperature\":0}" |
    python3 -c "import json,sys; print(json.load(sys.stdin)['content'])")
  if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "split server (2 ranks, $sm) answers what one process generates"
  else fail "split server ($sm): '$got' vs '$want'"; fi
  r0=$(rank_pid "$mp" 0)
  kill -TERM "$r0"
  if wait_gone "$mp" 20; then
    wait "$mp"; rc=$?
    [ $rc -eq 0 ] && pass "SIGTERM to rank 0 ($sm): every rank stopped, exit 0" || fail "SIGTERM to rank 0 ($sm): exit $rc"
  else fail "SIGTERM to rank 0 ($sm): the ranks did not stop"; fi
done

# A server whose rank 1 stalls past --rank-timeout: 503, exit non-zero, rank named
port=$((20000 + RANDOM % 20000))
"${MPIRUN[@]}" -np 2 "$BIN" serve -m "$M" -t 1 --port $port -np 1 --rank-timeout 2 --shutdown-grace 1 >"$work/stall" 2>"$work/stall.err" &
mp=$!
pids+=("$mp")
for _ in $(seq 1 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.1; done
r1=$(rank_pid "$mp" 1)
kill -STOP "$r1"
code=$(curl -s -o "$work/stall.body" -w '%{http_code}' "localhost:$port/completion" -d "{\"prompt\":\"$P\",\"n_predict\":64}")
if [ "$code" = 503 ]; then pass "rank 1 stalled: the request got 503 ($(head -c 160 "$work/stall.body"))"
else fail "rank 1 stalled: the request got $code ($(head -c 200 "$work/stall.body"))"; fi
if wait_gone "$mp" 30; then
  wait "$mp"; rc=$?
  if [ $rc -ne 0 ] && grep -qE "rank 1 \(.*\) did not (answer|take a message) within 2 s" "$work/stall.err"; then
    pass "rank 1 stalled: the server stopped, exit $rc, rank 1 named"
  else fail "rank 1 stalled: exit $rc, $(grep -E 'split|error' "$work/stall.err" | head -3)"; fi
else fail "rank 1 stalled: the server did not stop"; kill -9 "$r1"; fi
kill -9 "$r1" 2>/dev/null

# A rank killed (kill -9) during a request, with a rank timeout longer than mpirun waits before it ends the job
# (issue 49: the connection closed with no status line, or the stream ended after an ordinary chunk): rank 0 sees
# the rank's process end (its liveness connection closes) and answers 503, or an SSE error event, naming it
for sm in layer tensor; do
  for stream in false true; do
    port=$((20000 + RANDOM % 20000))
    "${MPIRUN[@]}" -np 2 "$BIN" serve -m "$M" -t 1 --port $port -np 1 -c 4096 --rank-timeout 60 --shutdown-grace 1 \
      -sm $sm >"$work/dead" 2>"$work/dead.err" &
    mp=$!
    pids+=("$mp")
    for _ in $(seq 1 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.1; done
    r1=$(rank_pid "$mp" 1)
    : >"$work/dead.body"
    # not streamed: rank 1 held first, so that the kill lands inside the request; streamed: killed after the
    # stream's first chunks (a long generation)
    [ "$stream" = false ] && kill -STOP "$r1"
    curl -s -N -o "$work/dead.body" -w '%{http_code}' "localhost:$port/completion" \
      -d "{\"prompt\":\"$P\",\"n_predict\":4000,\"ignore_eos\":true,\"stream\":$stream}" >"$work/dead.code" &
    cp=$!
    if [ "$stream" = true ]; then
      for _ in $(seq 1 100); do grep -q '^data' "$work/dead.body" && break; sleep 0.05; done
    else sleep 0.5; fi
    kill -9 "$r1"
    wait "$cp"
    code=$(cat "$work/dead.code")
    label="rank 1 killed during a request ($sm, stream $stream)"
    if [ "$stream" = false ] && [ "$code" = 503 ] && grep -q 'rank 1 (.*) ended' "$work/dead.body"; then
      pass "$label: 503 ($(head -c 120 "$work/dead.body"))"
    elif [ "$stream" = true ] && [ "$code" = 200 ] && tail -n 3 "$work/dead.body" | grep -q '"error".*rank 1 (.*) ended'; then
      pass "$label: the stream ends with an error event naming rank 1"
    else fail "$label: status $code, $(tail -c 200 "$work/dead.body")"; fi
    if wait_gone "$mp" 20; then
      wait "$mp"; rc=$?
      [ $rc -ne 0 ] && pass "$label: the job ended, exit $rc" || fail "$label: exit 0"
    else fail "$label: the job did not end"; fi
  done
done

# An idle split server whose rank 1 stalls, then SIGTERM to rank 0 (issue 49: it waited in MPI_Finalize without
# limit, in both modes): the stop is bounded by --rank-timeout, exit non-zero, the rank named
for sm in layer tensor; do
  port=$((20000 + RANDOM % 20000))
  "${MPIRUN[@]}" -np 2 "$BIN" serve -m "$M" -t 1 --port $port -np 1 --rank-timeout 2 --shutdown-grace 1 -sm $sm \
    >"$work/idle" 2>"$work/idle.err" &
  mp=$!
  pids+=("$mp")
  for _ in $(seq 1 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.1; done
  r0=$(rank_pid "$mp" 0)
  r1=$(rank_pid "$mp" 1)
  kill -STOP "$r1"
  kill -TERM "$r0"
  if wait_gone "$mp" 20; then
    wait "$mp"; rc=$?
    if [ $rc -ne 0 ] && grep -qE "rank 1 \(.*\) did not acknowledge the stop within 2 s" "$work/idle.err"; then
      pass "idle server, rank 1 stalled, SIGTERM ($sm): stopped within the rank timeout, exit $rc, rank 1 named"
    else fail "idle server, rank 1 stalled ($sm): exit $rc, $(grep -E 'rank|error' "$work/idle.err" | tail -3)"; fi
  else fail "idle server, rank 1 stalled, SIGTERM ($sm): the ranks did not stop"; fi
  kill -9 "$r1" 2>/dev/null
done

echo "split tests: $fails failure(s) in $(( $(date +%s) - t0 )) s"
[ $fails -eq 0 ]
