#!/usr/bin/env bash
# Replicas behind a load balancer: two `tandem serve` processes behind HAProxy with deploy/haproxy/haproxy.cfg.
#   1. 200 mixed requests (completions and chat, streamed and not, conversations with an X-Session-Id header),
#      8 at a time; after 60 answers replica r1 gets SIGTERM (a graceful drain: /health 503 at once, served
#      for --shutdown-drain 2 s, then its port closes and running generations finish). No request may fail,
#      every stream is complete, sessions stay on their replica while it is up, and r1 exits 0.
#   2. r1 started again; 80 more requests; after 25 answers replica r2 gets SIGKILL (a crash). Only requests
#      running on r2 may fail (they had started and are not replayed); everything sent after the kill succeeds.
# tests/replicas/client.py sends the requests and checks them. Needs haproxy (scripts/install-deps.sh) and
# ../shared/models/stories260K.gguf. Environment: TANDEM_BIN, TANDEM_SHARED_DIR; to watch it fail,
# TANDEM_HAPROXY_CFG (another config) and TANDEM_DRAIN_S (the replicas' --shutdown-drain, 2).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TANDEM_BIN:-$ROOT/build/bin/tandem}"
SHARED="${TANDEM_SHARED_DIR:-$ROOT/../shared}"
MODEL="$SHARED/models/stories260K.gguf"
CFG="${TANDEM_HAPROXY_CFG:-$ROOT/deploy/haproxy/haproxy.cfg}"
DRAIN="${TANDEM_DRAIN_S:-2}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
CLIENT="$ROOT/tests/replicas/client.py"

die() {
  echo "replicas: $*" >&2
  exit 1
}
command -v haproxy >/dev/null || die "haproxy not found: bash scripts/install-deps.sh installs it (Debian: haproxy)"
[ -x "$BIN" ] || die "tandem binary not found at $BIN (set TANDEM_BIN)"
[ -f "$MODEL" ] || die "required shared file is missing: $MODEL (set TANDEM_SHARED_DIR)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tandem-replicas.XXXXXX")"
PIDS=()
cleanup() {
  disown -a # no "Killed" job notices
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
show_logs() {
  for f in "$WORK"/r*.log; do
    echo "--- $(basename "$f") (last lines)"
    grep -v '^GET /health' "$f" | tail -n 15
  done
  # the balancer's state changes, and the requests that were not a plain 200 without retries
  echo "--- haproxy.log (state changes; requests not 200 or retried)"
  grep -E '^(Server|Proxy|backend)|"(GET|POST) ' "$WORK/haproxy.log" |
    grep -vE ' 200 [0-9]+ - - [-A-Za-z]{4} [0-9]+/[0-9]+/[0-9]+/[0-9]+/0 ' | tail -n 60
}

# three free loopback ports (held together, so they differ)
read -r LB P1 P2 < <("$PY" -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

start_replica() { # NAME PORT: sets REPLICA_PID
  "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$2" -c 4096 -np 2 -t 1 --no-webui \
    --shutdown-grace 30 --shutdown-drain "$DRAIN" 2>>"$WORK/$1.log" &
  REPLICA_PID=$!
  PIDS+=("$REPLICA_PID")
  "$PY" "$CLIENT" wait "http://127.0.0.1:$2/health" || { show_logs; die "replica $1 did not start"; }
}
# waits up to 40 s for the process to exit; its exit status must be 0
expect_clean_exit() { # NAME PID
  for _ in $(seq 400); do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$2" 2>/dev/null && { show_logs; die "$1 still running 40 s after SIGTERM"; }
  local rc=0
  wait "$2" || rc=$?
  [ "$rc" -eq 0 ] || { show_logs; die "$1 exited with status $rc after SIGTERM (expected 0)"; }
}

T0=$SECONDS
start_replica r1 "$P1"
R1=$REPLICA_PID
start_replica r2 "$P2"
R2=$REPLICA_PID
disown "$R2" # killed on purpose below: no "Killed" job notice
TANDEM_LB_BIND="127.0.0.1:$LB" TANDEM_REPLICA_1="127.0.0.1:$P1" TANDEM_REPLICA_2="127.0.0.1:$P2" \
  haproxy -db -f "$CFG" >"$WORK/haproxy.log" 2>&1 &
PIDS+=($!)
LB_URL="http://127.0.0.1:$LB"
"$PY" "$CLIENT" wait "$LB_URL/health" || { show_logs; die "haproxy did not start"; }

status=0
"$PY" "$CLIENT" --lb "$LB_URL" --label "SIGTERM r1" --requests 200 --concurrency 8 --sessions 16 --turns 5 \
  --stop-after 60 --stop-pid "$R1" --stop-name r1 --stop-signal TERM --drain "$DRAIN" --seed 1 || status=1
expect_clean_exit r1 "$R1"

start_replica r1 "$P1"
"$PY" "$CLIENT" wait "$LB_URL/health" r1 || { show_logs; die "haproxy did not take r1 back"; }
"$PY" "$CLIENT" --lb "$LB_URL" --label "SIGKILL r2" --requests 80 --concurrency 8 --sessions 6 --turns 5 \
  --stop-after 25 --stop-pid "$R2" --stop-name r2 --stop-signal KILL --seed 2 || status=1

if [ "$status" -ne 0 ]; then
  show_logs
  die "FAILED ($((SECONDS - T0)) s)"
fi
echo "replicas: ok ($((SECONDS - T0)) s)"
