#!/usr/bin/env bash
# A model split across "machines" on this host: one network namespace per rank (veth pairs on a bridge), mpirun
# starting one Open MPI daemon per namespace through `ip netns exec` (as it would over ssh), ranks talking TCP between
# namespaces. Link latency and rate: tc netem where the kernel has it (LINKS=netem); this machine's kernel
# (Firecracker) has neither netem nor tbf, so by default they are emulated in tandem's transport
# (TANDEM_LINK_EMULATION: each message held until its send time + one-way delay + bytes / rate).
# Speculation: n-grams (on random weights nothing is accepted: the cost of failing drafts), a suffix cache holding
# the same request's earlier answer (a repeated request: long accepted drafts; written by a first run of the same
# configuration),
# and a draft model when DRAFT is given. For each RTT and rank count: tokens/s plain and speculative
# (n-grams; a draft model when DRAFT is given), messages and bytes per generated token at rank 0, peak RSS per rank.
#   MODEL=tinyllama-q4_0.gguf [DRAFT=draft.gguf] [RTTS="0.1 1"] [RANKS="1 2 3"] [MODES="layer tensor"] [N=128] \
#     bash bench/split_net.sh
# Needs root (namespaces, tc), iproute2, Open MPI, GNU time. Rank 1 as one process without mpirun is the baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/build/bin/tandem}
MODEL=${MODEL:?MODEL=path/to/target.gguf}
DRAFT=${DRAFT:-}
RTTS=${RTTS:-"0.1 1"}
RANKS=${RANKS:-"1 2 3"}
MODES=${MODES:-layer}  # --split-mode of the runs on several ranks
N=${N:-128}
T=${T:-1}  # threads per rank (2 cores here: 1 each, so that 2 ranks do not share a core)
RATE=${RATE:-1}  # Gbit/s
LINKS=${LINKS:-emulated}
PROMPT=${PROMPT:-"The history of the city begins with a small settlement by the river, where"}
sfx=""
# shellcheck source=bench/netns.sh
source bench/netns.sh
trap 'rm -f "$sfx".*; netns_down' EXIT
netns_up tsn 10.78.0 3
set_rtt() {  # half the round trip on each side of every link
  if [ "$LINKS" = netem ]; then
    local half
    half=$(python3 -c "print($1 / 2)")
    for r in 0 1 2; do
      ip netns exec tsn$r tc qdisc replace dev tsnv${r}p root netem delay "${half}ms" rate "${RATE}gbit"
    done
  else
    export TANDEM_LINK_EMULATION="$1,$RATE"
  fi
}

run() {  # run NP ARGS...: prints "tokens/s msgs/token bytes/token rss_rank0_MiB rss_rank1_MiB ..."
  local np=$1; shift
  local out err
  out=$(mktemp)
  err=$(mktemp)
  if [ "$np" = 1 ]; then
    /usr/bin/time -f "RSS %M" "$BIN" generate -m "$MODEL" -p "$PROMPT" -n "$N" -t "$T" --temp 0 --json "$@" >"$out" 2>"$err"
  else
    local hosts=tsn0
    for r in $(seq 1 $((np - 1))); do hosts+=",tsn$r"; done
    TANDEM_LINK_EMULATION=${TANDEM_LINK_EMULATION:-} netns_mpirun -x TANDEM_LINK_EMULATION -H "$hosts" -np "$np" \
      /usr/bin/time -f "RSS %M" "$BIN" generate -m "$MODEL" -p "$PROMPT" -n "$N" -t "$T" --temp 0 --json "$@" \
      >"$out" 2>"$err"
  fi
  python3 - "$out" "$err" <<'EOF'
import json, re, sys
err = open(sys.argv[2]).read()
lines = open(sys.argv[1]).read().strip().splitlines()
if not lines:  # the run failed: say how
    print("FAILED: " + " | ".join(err.strip().splitlines()[-3:]))
    sys.exit(0)
j = json.loads(lines[-1])
rss = [int(x) / 1024 for x in re.findall(r"RSS (\d+)", err)]
n = max(1, j["timings"]["predicted_n"])
s = j.get("split", {})
spec = j.get("spec", {})
tpp = spec.get("mean_accepted_length") if spec else None
print("%7.2f t/s  %5.1f msg/tok  %7.0f B/tok  tokens/pass %s  RSS MiB %s" % (
    j["timings"]["predicted_per_second"], s.get("messages", 0) / n, s.get("bytes", 0) / n,
    "%.2f" % tpp if tpp else "1", " / ".join("%.0f" % r for r in rss)))
EOF
  rm -f "$out" "$err"
}

sfx=$(mktemp -u)
echo "model $(basename "$MODEL") ($(du -m "$MODEL" | cut -f1) MiB), N=$N, $T thread(s) per rank, links $RATE Gbit/s ($LINKS)"
for rtt in $RTTS; do
  set_rtt "$rtt"
  echo "== RTT $rtt ms"
  for np in $RANKS; do
    for mode in $MODES; do
      [ "$np" = 1 ] && [ "$mode" != "${MODES%% *}" ] && continue  # one process: no split to vary
      sm=(-sm "$mode")
      label="ranks $np"
      [ "$np" = 1 ] || label+=" $mode"
      echo "$label plain:     $(run "$np" "${sm[@]}")"
      echo "$label ngram:     $(run "$np" "${sm[@]}" --spec-type ngram)"
      # the suffix cache holds this configuration's own earlier answer (a tensor split's sums, in another order
      # than one process's, may choose other tokens on random weights' near-ties)
      run "$np" "${sm[@]}" -lcd "$sfx.$np.$mode" >/dev/null
      echo "$label suffix:    $(run "$np" "${sm[@]}" -lcs "$sfx.$np.$mode")"
      rm -f "$sfx.$np.$mode"
      [ -n "$DRAFT" ] && echo "$label draft:     $(run "$np" "${sm[@]}" -md "$DRAFT")"
    done
  done
done
