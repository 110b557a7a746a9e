#!/bin/sh
# Runs inside the CPU image (docker/build-and-smoke.sh mounts it): starts tokenmill-server on
# the model in /models and tokenmill-gateway in front of it, waits until the image's own
# HEALTHCHECK command and the gateway's /health pass, runs one completion end to end, and
# stops both (the server must drain and exit 0).
# Environment: TOKENMILL_PORT, TOKENMILL_METRICS_PORT, TOKENMILL_GATEWAY_PORT (free ports) and
# HEALTHCHECK (the image's HEALTHCHECK command line).
set -eu

fail() {
  echo "smoke: FAIL: $*" >&2
  for log in /tmp/server.log /tmp/gateway.log; do
    [ -f "$log" ] && { echo "--- $log" >&2; tail -n 30 "$log" >&2; }
  done
  exit 1
}

wait_for() {  # seconds command...: polls the command until it succeeds
  seconds=$1
  shift
  i=0
  while [ "$i" -lt "$seconds" ]; do
    "$@" >/dev/null 2>&1 && return 0
    i=$((i + 1))
    sleep 1
  done
  return 1
}

[ "$(id -u)" != 0 ] || fail "the image runs as root"
echo "smoke: user $(id -un) ($(id -u)), model $TOKENMILL_MODEL"
[ -r "$TOKENMILL_MODEL" ] || fail "$TOKENMILL_MODEL is not readable: mount the models on /models"

tokenmill-server > /tmp/server.log 2>&1 &
server=$!
tokenmill-gateway --backend "127.0.0.1:$TOKENMILL_PORT" > /tmp/gateway.log 2>&1 &
gateway=$!
trap 'kill "$server" "$gateway" 2>/dev/null || true' EXIT

wait_for 180 sh -c "$HEALTHCHECK" || fail "the HEALTHCHECK ($HEALTHCHECK) never passed"
echo "smoke: HEALTHCHECK passes: $(sh -c "$HEALTHCHECK")"
gateway_url="http://127.0.0.1:$TOKENMILL_GATEWAY_PORT"
wait_for 60 curl -fsS "$gateway_url/health" || fail "the gateway's /health never answered 200"
echo "smoke: gateway /health: 200"

model=$(curl -fsS "$gateway_url/v1/models" | sed -n 's/.*"id" *: *"\([^"]*\)".*/\1/p')
[ -n "$model" ] || fail "GET /v1/models names no model"
body='{"model": "'"$model"'", "prompt": "The capital of France is", "max_tokens": 8,
       "temperature": 0, "ignore_eos": true}'
response=$(curl -fsS "$gateway_url/v1/completions" -H 'Content-Type: application/json' \
  -d "$body") || fail "POST /v1/completions failed"
echo "smoke: completion: $response"
echo "$response" | grep -Eq '"completion_tokens" *: *8[,}]' || fail "not 8 completion tokens"
echo "$response" | grep -Eq '"text" *: *"[^"]' || fail "empty completion text"
# The engine publishes its counters after the step that finished the request.
generated() {
  curl -fsS "http://127.0.0.1:$TOKENMILL_METRICS_PORT/metrics" |
    grep -Eq '^tokenmill:generation_tokens_total(\{[^}]*\})? [1-9]'
}
wait_for 10 generated || fail "the server's /metrics counts no generated tokens"
echo "smoke: server /metrics counts the generated tokens"

kill -TERM "$server" "$gateway"
server_status=0
wait "$server" || server_status=$?
wait "$gateway" || true
trap - EXIT
[ "$server_status" = 0 ] || fail "tokenmill-server exited with $server_status after SIGTERM"
echo "smoke: PASS"
