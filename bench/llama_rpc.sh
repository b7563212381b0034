#!/usr/bin/env bash
# tandem's layer split beside llama.cpp's RPC backend, on the same file, in one run: two "machines" as two network
# namespaces on this host (veth pairs on a bridge, TCP between them, no added delay: this kernel has no tc netem and
# llama.cpp cannot use tandem's emulated links). llama.cpp: `ggml-rpc-server` in namespace 1, `llama-bench --rpc` in
# namespace 0 with half the layers offloaded to the RPC device (-ngl); tandem: mpirun with one rank per namespace.
#   LLAMA=/path/to/llama.cpp/build MODEL=tinyllama-q4_0.gguf [N=64] [R=3] bash bench/llama_rpc.sh
# llama.cpp 2026-09 from node-llama-cpp@3.22.1 (npm pack; git clone package/llama/gitRelease.bundle), built with
#   cmake -B build -DGGML_RPC=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
#   cmake --build build --target ggml-rpc-server llama-bench
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/build/bin/tandem}
LLAMA=${LLAMA:?LLAMA=path/to/llama.cpp/build}
MODEL=${MODEL:?MODEL=path/to/model.gguf}
N=${N:-64}
R=${R:-3}
rpc_bin=$(ls "$LLAMA"/bin/ggml-rpc-server "$LLAMA"/bin/rpc-server 2>/dev/null | head -1 || true)
# shellcheck source=bench/netns.sh
source bench/netns.sh
trap 'pkill -f "ggml-rpc-server -H 10.79.0.2" 2>/dev/null || true; netns_down' EXIT
netns_up tln 10.79.0 2
n_layer=$("$BIN" info "$MODEL" 2>/dev/null | sed -n 's/.*, \([0-9]*\) layers,.*/\1/p' | head -1)
half=$((n_layer / 2))
echo "model $(basename "$MODEL"), $n_layer layers, tg$N, 1 thread per machine, $R repetitions"

# llama.cpp alone, then with half its layers on the RPC server in the other namespace
ip netns exec tln0 "$LLAMA/bin/llama-bench" -m "$MODEL" -p 0 -n "$N" -t 1 -r "$R" -o csv 2>/dev/null |
  python3 -c "import csv,sys; r=list(csv.DictReader(sys.stdin))[-1]; print('llama.cpp, one process:      %.2f t/s' % float(r['avg_ts']))"
ip netns exec tln1 "$rpc_bin" -H 10.79.0.2 -p 50052 -t 1 >/dev/null 2>&1 &
sleep 2
ip netns exec tln0 "$LLAMA/bin/llama-bench" -m "$MODEL" -p 0 -n "$N" -t 1 -r "$R" --rpc 10.79.0.2:50052 -ngl "$half" -o csv 2>/dev/null |
  python3 -c "import csv,sys; r=list(csv.DictReader(sys.stdin))[-1]; print('llama.cpp, RPC, 2 machines:  %.2f t/s' % float(r['avg_ts']))"
pkill -f "ggml-rpc-server -H 10.79.0.2" || true

# tandem alone, then 2 ranks
tps() { python3 -c "import json,sys; print('%.2f' % json.loads(sys.stdin.read().strip().splitlines()[-1])['timings']['predicted_per_second'])"; }
for i in $(seq 1 "$R"); do
  echo "tandem, one process:          $(ip netns exec tln0 "$BIN" generate -m "$MODEL" -p "Once upon a time" -n "$N" -t 1 --temp 0 --json 2>/dev/null | tps) t/s"
  echo "tandem, 2 ranks:              $(netns_mpirun -H tln0,tln1 -np 2 \
    "$BIN" generate -m "$MODEL" -p "Once upon a time" -n "$N" -t 1 --temp 0 --json 2>/dev/null | tps) t/s"
done
