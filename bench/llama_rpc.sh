#!/usr/bin/env bash
# tandem's split beside llama.cpp's RPC backend, on the same file, in one run: two "machines" as two network
# namespaces on this host (veth pairs on a bridge, TCP between them). llama.cpp: `ggml-rpc-server` in namespace 1,
# `llama-bench --rpc` in namespace 0 with half the layers offloaded to the RPC device (-ngl); tandem: mpirun with one
# rank per namespace, plain and speculative (a suffix cache holding the same request's earlier answer). Speculation in
# llama.cpp with the same kind of draft: llama-lookup with a dynamic n-gram cache of the same request's earlier
# answers (-lcd; it trusts an n-gram after a few occurrences, so the cache is warmed by WARM runs first),
# --spec-draft-n-max 16 (its --draft-max).
# Added latency: this kernel has no tc netem, so for each round trip in RTTS the delay is emulated on both sides in
# the same way, each message held for half the round trip plus its bytes over RATE: in tandem's transport
# (TANDEM_LINK_EMULATION) and, for llama.cpp, by a relay between its client and server (bench/delay_proxy.py; the
# relay's own cost shows in its RTT 0 row beside the direct one).
#   LLAMA=/path/to/llama.cpp/build MODEL=tinyllama-q4_0.gguf [N=64] [R=3] [RTTS="0 1"] [RATE=1] bash bench/llama_rpc.sh
# llama.cpp 2026-09 from node-llama-cpp@3.22.1 (npm pack; git clone package/llama/gitRelease.bundle), built with
#   cmake -B build -DGGML_RPC=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
#   cmake --build build --target ggml-rpc-server llama-bench
#   cmake -B build -DLLAMA_BUILD_EXAMPLES=ON && cmake --build build --target llama-lookup
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/build/bin/tandem}
LLAMA=${LLAMA:?LLAMA=path/to/llama.cpp/build}
MODEL=${MODEL:?MODEL=path/to/model.gguf}
N=${N:-64}
R=${R:-3}
RTTS=${RTTS:-"0 1"}
RATE=${RATE:-1}  # Gbit/s
WARM=${WARM:-4}  # llama-lookup runs that fill its dynamic cache before the measured ones
PROMPT="Once upon a time"
rpc_bin=$(ls "$LLAMA"/bin/ggml-rpc-server "$LLAMA"/bin/rpc-server 2>/dev/null | head -1 || true)
# shellcheck source=bench/netns.sh
source bench/netns.sh
sfx=$(mktemp -u)
trap 'pkill -f "ggml-rpc-server -H 10.79.0.2" 2>/dev/null || true; pkill -f "delay_proxy.py 127.0.0.1:5005" 2>/dev/null || true; rm -f "$sfx" "$sfx".*; netns_down' EXIT
netns_up tln 10.79.0 2
n_layer=$("$BIN" info "$MODEL" 2>/dev/null | sed -n 's/.*, \([0-9]*\) layers,.*/\1/p' | head -1)
half=$((n_layer / 2))
echo "model $(basename "$MODEL"), $n_layer layers, tg$N, 1 thread per machine, $R repetitions, links $RATE Gbit/s"

bench_llama() {  # bench_llama LABEL [RPC_ADDR]: llama-bench's mean tokens/s
  local label=$1 rpc=(); [ $# -gt 1 ] && rpc=(--rpc "$2" -ngl "$half")
  ip netns exec tln0 "$LLAMA/bin/llama-bench" -m "$MODEL" -p 0 -n "$N" -t 1 -r "$R" "${rpc[@]}" -o csv 2>/dev/null |
    python3 -c "import csv,sys; r=list(csv.DictReader(sys.stdin))[-1]; print('%-44s %.2f t/s' % (sys.argv[1], float(r['avg_ts'])))" "$label"
}
tps() { python3 -c "import json,sys; print('%.2f' % json.loads(sys.stdin.read().strip().splitlines()[-1])['timings']['predicted_per_second'])"; }
tandem_split() {  # tandem_split RTT ARGS...: 2 ranks, links emulated at RTT ms
  TANDEM_LINK_EMULATION="$1,$RATE" netns_mpirun -x TANDEM_LINK_EMULATION -H tln0,tln1 -np 2 \
    "$BIN" generate -m "$MODEL" -p "$PROMPT" -n "$N" -t 1 --temp 0 --json "${@:2}" 2>/dev/null | tps
}

lookup() {  # lookup LABEL [RPC_ADDR]: llama-lookup's tokens/s, the mean of R runs (the cache warmed)
  local label=$1 rpc=(); [ $# -gt 1 ] && rpc=(--rpc "$2" -ngl "$half")
  local speeds=""
  for _ in $(seq 1 "$R"); do
    speeds+=" $(ip netns exec tln0 "$LLAMA/bin/llama-lookup" -m "$MODEL" -p "$PROMPT" -n "$N" -t 1 --temp 0 \
      --spec-draft-n-max 16 -lcd "$sfx.lookup" "${rpc[@]}" 2>&1 | sed -n 's/.*speed: *\([0-9.]*\) t\/s.*/\1/p' | tail -1)"
  done
  python3 -c "import sys; v=[float(x) for x in sys.argv[2:]]; print('%-44s %.2f t/s' % (sys.argv[1], sum(v) / len(v)))" "$label" $speeds
}

bench_llama "llama.cpp, one process:"
have_lookup=""
if [ -x "$LLAMA/bin/llama-lookup" ]; then
  have_lookup=1
  for _ in $(seq 1 "$WARM"); do
    ip netns exec tln0 "$LLAMA/bin/llama-lookup" -m "$MODEL" -p "$PROMPT" -n "$N" -t 1 --temp 0 -lcd "$sfx.lookup" >/dev/null 2>&1
  done
  lookup "llama.cpp, one process, lookup:"
fi
ip netns exec tln1 "$rpc_bin" -H 10.79.0.2 -p 50052 -t 1 >/dev/null 2>&1 &
sleep 2
bench_llama "llama.cpp, RPC, 2 machines, direct:" 10.79.0.2:50052
port=50053
for rtt in $RTTS; do
  ip netns exec tln0 python3 bench/delay_proxy.py 127.0.0.1:$port 10.79.0.2:50052 "$(python3 -c "print($rtt / 2)")" "$RATE" &
  sleep 1
  bench_llama "llama.cpp, RPC, 2 machines, relay RTT $rtt ms:" 127.0.0.1:$port
  [ -n "$have_lookup" ] && lookup "llama.cpp, RPC, relay RTT $rtt ms, lookup:" 127.0.0.1:$port
  pkill -f "delay_proxy.py 127.0.0.1:$port" || true
  port=$((port + 1))
done
pkill -f "ggml-rpc-server -H 10.79.0.2" || true

# each configuration's suffix cache holds its own earlier answer (a tensor split's sums, in another order than one
# process's, may choose other tokens at random weights' near-ties)
ip netns exec tln0 "$BIN" generate -m "$MODEL" -p "$PROMPT" -n "$N" -t 1 --temp 0 -lcd "$sfx" >/dev/null 2>&1
for sm in layer tensor; do tandem_split 0 -sm $sm -lcd "$sfx.$sm" >/dev/null; done
for i in $(seq 1 "$R"); do
  echo "tandem, one process:                          $(ip netns exec tln0 "$BIN" generate -m "$MODEL" -p "$PROMPT" -n "$N" -t 1 --temp 0 --json 2>/dev/null | tps) t/s"
  echo "tandem, one process, suffix drafts:           $(ip netns exec tln0 "$BIN" generate -m "$MODEL" -p "$PROMPT" -n "$N" -t 1 --temp 0 --json -lcs "$sfx" 2>/dev/null | tps) t/s"
  for rtt in $RTTS; do
    for sm in layer tensor; do
      printf '%-44s %s t/s\n' "tandem, 2 ranks, $sm, RTT $rtt ms:" "$(tandem_split "$rtt" -sm $sm)"
      printf '%-44s %s t/s\n' "tandem, 2 ranks, $sm, RTT $rtt ms, suffix:" "$(tandem_split "$rtt" -sm $sm -lcs "$sfx.$sm")"
    done
  done
done
