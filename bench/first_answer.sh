#!/usr/bin/env bash
# The seconds from `./scripts/serve` in a checkout to the gateway's first 200 on
# POST /v1/completions: serve in the background, post a completion every second with bash's
# /dev/tcp (a bare image has no curl), print the time of the first answer, then stop serving.
# Each line of serve's output is stamped with its offset, so a slow setup phase shows.
# bench/fresh_start.sh runs it in a bare container; on a machine with the Debian packages
# (issue 37's measurement: a fresh clone, an empty compiler cache, no pip cache, no venv):
#   git clone REPO /tmp/fresh && cd /tmp/fresh && CCACHE_DIR=$(mktemp -d) PIP_NO_CACHE_DIR=1 \
#     METRICS_PORT=8102 TOKENMILL_PORT=50151 TOKENMILL_GATEWAY_PORT=8100 bench/first_answer.sh
# MODEL_NAME: the served name asked for (default: scripts/serve's default model's);
# TOKENMILL_DIR: the checkout (default: this script's).
set -uo pipefail
cd "${TOKENMILL_DIR:-$(dirname "$0")/..}"
start=$(date +%s)
stamp() { while IFS= read -r line; do echo "[$(( $(date +%s) - start )) s] $line"; done; }
./scripts/serve --metrics-port "$METRICS_PORT" > >(stamp) 2>&1 &
serve=$!
body="{\"model\":\"${MODEL_NAME:-qwen2.5-coder-1.5b-instruct}\",\"prompt\":\"The capital of France is\",\"max_tokens\":8}"
ask() {
  { exec 3<>"/dev/tcp/127.0.0.1/$TOKENMILL_GATEWAY_PORT"; } 2>/dev/null || return 1
  printf 'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "${#body}" "$body" >&3
  local reply
  reply=$(cat <&3)
  exec 3>&-
  [[ $reply == "HTTP/1.1 200"* ]] && echo "${reply##*$'\r\n\r\n'}"
}
until answer=$(ask); do
  sleep 1
  [ $(( $(date +%s) - start )) -lt 7200 ] || { echo "fresh_start: no answer in 2 h"; exit 1; }
done
echo "fresh_start: first answer after $(( $(date +%s) - start )) s: $answer"
kill -TERM "$serve"  # scripts/serve stops the server and the gateway
wait "$serve"
