#!/usr/bin/env bash
# Speed of two tandem binaries, interleaved in one run: the check that a restructuring changed no speed.
#   bash bench/compare_speed.sh OLD_TANDEM NEW_TANDEM MODEL.gguf [MODEL.gguf ...]
# Each round runs `tandem bench` (pp, tg and the verification passes vb1..vb16, one repetition) with the old binary
# and then the new one on every model, ROUNDS times (default 3), alternating which goes first, so that drift of the
# machine (other load, clocks) falls on both alike. Prints per model and test the median tokens/s of each and the
# ratio new / old. Env: ROUNDS, P (512), N (64), VB (1,2,4,8,16), THREADS (2).
set -euo pipefail
old=$1 new=$2
shift 2
ROUNDS=${ROUNDS:-3} P=${P:-512} N=${N:-64} VB=${VB:-1,2,4,8,16} THREADS=${THREADS:-2}
out=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  for m in "$@"; do
    order="old new"
    [ $((r % 2)) = 0 ] && order="new old"
    for tag in $order; do
      bin=$old
      [ "$tag" = new ] && bin=$new
      "$bin" bench -m "$m" -p "$P" -n "$N" --vb "$VB" -r 1 -t "$THREADS" --json --no-bandwidth 2>/dev/null \
        >"$out/$(basename "$m").$tag.$r.json"
    done
  done
done
python3 - "$out" "$@" <<'PY'
import glob, json, os, statistics, sys
out, models = sys.argv[1], sys.argv[2:]
print(f"{'model':34} {'test':8} {'old t/s':>10} {'new t/s':>10} {'new/old':>8}")
for m in models:
    b = os.path.basename(m)
    runs = {tag: [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{b}.{tag}.*.json"))] for tag in ("old", "new")}
    tests = [e["test"] for e in runs["old"][0] if "avg_ts" in e and e["test"] != "memory"]
    for t in tests:
        med = {tag: statistics.median(e["avg_ts"] for run in runs[tag] for e in run if e["test"] == t)
               for tag in runs}
        print(f"{b:34} {t:8} {med['old']:10.2f} {med['new']:10.2f} {med['new'] / med['old']:8.3f}")
PY
rm -rf "$out"
