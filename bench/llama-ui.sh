#!/usr/bin/env bash
# llama.cpp's own web UI (its Svelte app, tools/ui of llama.cpp 2026-09) against `tandem serve` in a browser:
# builds the UI with npm outside the repository, starts `tandem serve --path <the built UI>` with a draft model, and
# drives it with bench/llama-ui.mjs (Debian's chromium, playwright-core of tests/server): load, send, stream,
# regenerate, stop, reload. Fails on any console error or warning, page error, failed request or HTTP answer >= 400.
#   bash bench/llama-ui.sh                       the built tandem (build/bin/tandem), UI served by tandem (--path)
#   OLD=1 TANDEM_BIN=/path/to/old bash bench/llama-ui.sh
#                                                a tandem without --path: the harness serves the UI's files
# Environment: TANDEM_BIN, TANDEM_SHARED_DIR, LLAMACPP_SRC (else from npm: scripts/llama-source.sh),
#   UI_WORK (/tmp/tandem-llama-ui: the UI's copy, node_modules and build), UI_SHOTS (a folder for screenshots),
#   CHROMIUM_PATH (/usr/bin/chromium).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TANDEM_BIN:-$repo/build/bin/tandem}
SHARED=${TANDEM_SHARED_DIR:-$repo/../shared}
WORK=${UI_WORK:-/tmp/tandem-llama-ui}
mkdir -p "$WORK"
t0=$(date +%s)
src=$(bash "$repo/scripts/llama-source.sh" "$WORK")
[[ -f "$src/tools/ui/package.json" ]] || { echo "FAIL: $src has no tools/ui (llama.cpp's web UI)"; exit 1; }
if [[ ! -f "$WORK/ui/dist/index.html" || "$src/tools/ui/package.json" -nt "$WORK/ui/dist/index.html" ]]; then
  rm -rf "$WORK/ui" && cp -r "$src/tools/ui" "$WORK/ui"
  (cd "$WORK/ui" && npm ci --no-audit --no-fund --ignore-scripts >"$WORK/npm.log" 2>&1 && npm run build >>"$WORK/npm.log" 2>&1) ||
    { tail -20 "$WORK/npm.log"; echo "FAIL: building llama.cpp's UI (log: $WORK/npm.log)"; exit 1; }
  echo "built llama.cpp's UI in $(( $(date +%s) - t0 )) s: $WORK/ui/dist"
fi
[[ -d "$repo/tests/server/node_modules/playwright-core" ]] || (cd "$repo/tests/server" && npm ci --no-audit --no-fund >/dev/null)
M=$SHARED/models/stories260K.gguf
draft=$WORK/stories-q4_0.gguf
[[ -f "$draft" ]] || "$BIN" quantize "$M" "$draft" Q4_0 >/dev/null 2>&1
port=$((20000 + RANDOM % 20000))
args=(serve -m "$M" -md "$draft" --port "$port" -n 400 -c 8192 -np 1)
[[ -z "${OLD:-}" ]] && args+=(--path "$WORK/ui/dist")
"$BIN" "${args[@]}" >"$WORK/server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 1 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.1; done
rc=0
if [[ -z "${OLD:-}" ]]; then node "$repo/bench/llama-ui.mjs" "http://127.0.0.1:$port" || rc=$?
else node "$repo/bench/llama-ui.mjs" "http://127.0.0.1:$port" "$WORK/ui/dist" || rc=$?; fi
echo "server: $(grep -cE '^(GET|POST|DELETE|OPTIONS|HEAD) ' "$WORK/server.log") requests logged ($WORK/server.log)"
[[ $rc -eq 0 ]] && echo "llama.cpp's UI against tandem: no console error, no failed request ($(( $(date +%s) - t0 )) s)" ||
  echo "FAIL: llama.cpp's UI against tandem: see problems above"
exit $rc
