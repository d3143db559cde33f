#!/usr/bin/env bash
# The pi coding agent (@mariozechner/pi-coding-agent) against `fak serve`: two turns, the second
# continuing the first's session, over each of pi's three wire APIs (chat completions, responses,
# Anthropic messages). Exits 0 when all six turns complete with HTTP 200s only and turn 2 of each
# reuses turn 1's prefix from the cache; 77 (CTest's usual SKIP_RETURN_CODE) when node/npm or the
# package are not available; 1 otherwise.
#
#   tests/agent_clis/pi.sh [path/to/fak] [model dir]
#   env: PI_PREFIX  npm prefix holding the package (default /tmp/fak_test_pi; installed there from
#                   the npm registry when missing, ~15 s); PI_VERSION (default: latest)
#
# Needs: node >= 20 and npm (or an already-installed PI_PREFIX), the fak binary, models/pycoder-6m.
# Everything talks to 127.0.0.1 only: pi runs with --offline, PI_OFFLINE=1, PI_TELEMETRY=0, a
# scratch HOME and a dummy key. Takes ~10-20 s once installed (--ctx 4096, pi's prompt is ~1.8k
# tokens; with contextWindow 4096 pi also runs its auto-compaction after each turn, so the server
# sees two requests per turn). Not registered in CMake.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FAK="${1:-$ROOT/build/fak}"
MODEL="${2:-$ROOT/models/pycoder-6m}"
PREFIX="${PI_PREFIX:-/tmp/fak_test_pi}"
PKG=@mariozechner/pi-coding-agent
KEY=dummy-key

command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node/npm not found"; exit 77; }
[ -x "$FAK" ] || { echo "FAIL: no fak binary at $FAK"; exit 1; }
PI="$PREFIX/node_modules/.bin/pi"
if [ ! -x "$PI" ]; then
  mkdir -p "$PREFIX"
  (cd "$PREFIX" && timeout 300 npm install --prefix "$PREFIX" --no-audit --no-fund "$PKG@${PI_VERSION:-latest}" >/dev/null 2>&1 ||
   timeout 300 npm install --prefix "$PREFIX" --no-audit --no-fund --prefer-online "$PKG@${PI_VERSION:-latest}" >/dev/null 2>&1)
  [ -x "$PI" ] || { echo "SKIP: could not install $PKG into $PREFIX"; exit 77; }
fi

SCRATCH="$(mktemp -d /tmp/fak_pi_test.XXXXXX)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
cp "$FAK" "$SCRATCH/fak"

# a free port: let the kernel pick one, then hand it to the server
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18499)
KEYS=$KEY OMP_WAIT_POLICY=PASSIVE "$SCRATCH/fak" serve -m "$MODEL" --model-name pycoder-6m \
  --host 127.0.0.1 --port "$PORT" --parallel 2 --max-tokens 256 --ctx 4096 --api-key-env KEYS \
  --log-requests >"$SCRATCH/server.log" 2>&1 </dev/null &
SERVER_PID=$!
for _ in $(seq 100); do grep -q "listening on" "$SCRATCH/server.log" && break; sleep 0.1; done
grep -q "listening on" "$SCRATCH/server.log" || { echo "FAIL: fak serve did not start"; cat "$SCRATCH/server.log"; exit 1; }
URL="http://127.0.0.1:$PORT"

cached() { curl -s "$URL/metrics" | awk '/^fak_cached_prompt_tokens_total /{print $2}'; }

fail=0
for api in openai-completions openai-responses anthropic-messages; do
  HOME_DIR="$SCRATCH/home_$api"; mkdir -p "$HOME_DIR/.pi/agent" "$HOME_DIR/work"
  base="$URL/v1"; [ "$api" = anthropic-messages ] && base="$URL"
  cat >"$HOME_DIR/.pi/agent/models.json" <<EOF
{"providers": {"fak": {"baseUrl": "$base", "api": "$api", "apiKey": "$KEY",
  "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
  "models": [{"id": "pycoder-6m", "contextWindow": 4096, "maxTokens": 256}]}}}
EOF
  echo '{"enableInstallTelemetry": false}' >"$HOME_DIR/.pi/agent/settings.json"
  for turn in 1 2; do
    extra=""; prompt="write a python function that reverses a string"
    [ $turn = 2 ] && extra="--continue" && prompt="now add a docstring to it"
    lines=$(wc -l <"$SCRATCH/server.log"); c0=$(cached); t0=$(date +%s.%N)
    (cd "$HOME_DIR/work" && env -i PATH="$PATH" HOME="$HOME_DIR" PI_CODING_AGENT_DIR="$HOME_DIR/.pi/agent" \
      PI_OFFLINE=1 PI_TELEMETRY=0 PI_SKIP_VERSION_CHECK=1 NO_COLOR=1 \
      timeout -k 5 120 "$PI" --offline --provider fak --model pycoder-6m --mode json $extra -p "$prompt" \
      >"$HOME_DIR/out$turn.jsonl" 2>"$HOME_DIR/err$turn.txt" </dev/null)
    rc=$?
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    c1=$(cached)
    statuses=$(tail -n +$((lines + 1)) "$SCRATCH/server.log" | grep -oE '(POST|GET) /v1/[a-z/]+ -> [0-9]+' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    stop=$(grep '"type":"agent_end"' "$HOME_DIR/out$turn.jsonl" | python3 -c 'import json,sys; m=json.loads(sys.stdin.read())["messages"][-1]; print(m.get("stopReason"), m.get("errorMessage") or "")' 2>/dev/null)
    ok=1
    [ $rc = 0 ] || ok=0
    [ -n "$stop" ] || ok=0
    case "$stop" in error*|aborted*) ok=0;; esac
    echo "$statuses" | grep -q -- '-> 200' || ok=0
    echo "$statuses" | grep -qE -- '-> [^2][0-9]+' && ok=0
    [ $turn = 2 ] && [ "$((c1 - c0))" -le 0 ] && ok=0
    printf '%s %-18s turn %s: rc %s, %.1f s, server:%s cached %s, pi stopReason: %s\n' \
      "$([ $ok = 1 ] && echo ok || echo FAIL)" "$api" $turn $rc "$secs" "$statuses" "$((c1 - c0))" "$stop"
    if [ $ok = 0 ]; then
      fail=1; tail -c 600 "$HOME_DIR/err$turn.txt"; tail -c 600 "$HOME_DIR/out$turn.jsonl"; echo
    fi
  done
done
[ $fail = 0 ] && echo "PASS: pi $(node -p "require('$PREFIX/node_modules/$PKG/package.json').version"), 3 APIs x 2 turns"
exit $fail
