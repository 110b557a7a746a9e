#!/usr/bin/env bash
# The first start on a fresh machine (issue 26): the tree of a commit copied into a bare Debian
# container (docker/build-and-smoke.sh's base image: no compiler, no Python, empty apt lists, no
# compiler cache), `./scripts/serve` started there, and the seconds until the gateway first
# answers a completion. Each setup phase's start is printed with its offset, so a slow phase
# shows. Compare commits in one session on a quiet machine, one after the other:
#   bench/fresh_start.sh 44d5969^     # scripts/serve before `scripts/setup --serve`
#   bench/fresh_start.sh HEAD
# (MODEL_NAME=SmolLM2-135M-Instruct for a commit from before the default model was Qwen2.5-Coder.)
# The container shares the host's network (chroot isolation, as the smoke test): PyPI and the
# Debian mirror must be reachable, and the host's CA bundle is handed to pip (a proxy's CA).
# TOKENMILL_TEST_MODELS, when set, is mounted for a setup that wants stories260K (the full
# setup before 44d5969 downloaded it from Hugging Face, which this machine cannot reach).
set -euo pipefail
cd "$(dirname "$0")/.."

commit=${1:?usage: bench/fresh_start.sh COMMIT}
log=${LOG:-/tmp/fresh_start.$(git rev-parse --short "$commit").log}
BASE=localhost/debian:$(. /etc/os-release && echo "$VERSION_CODENAME")-slim-local
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo podman image exists "$BASE" ||
  { echo "fresh_start: no $BASE: run docker/build-and-smoke.sh once" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

work=$(mktemp -d)
container=$($sudo buildah from --pull-never "$BASE")
cleanup() { $sudo buildah rm "$container" >/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir "$work/tokenmill"
git archive "$commit" | tar -x -C "$work/tokenmill"
$sudo buildah copy "$container" "$work/tokenmill" /root/tokenmill >/dev/null
cp /etc/ssl/certs/ca-certificates.crt "$work/host-ca.crt"

# Runs in the container: bench/first_answer.sh (scripts/serve, then a completion every second).
cp bench/first_answer.sh "$work/first_answer.sh"

echo "fresh_start: $(git rev-parse --short "$commit") in a bare $BASE on $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
test_models=()
[ -n "${TOKENMILL_TEST_MODELS:-}" ] &&
  test_models=(-v "$TOKENMILL_TEST_MODELS:/test-models:ro" --env TOKENMILL_TEST_MODELS=/test-models)
$sudo buildah run --isolation=chroot "${test_models[@]}" \
  -v "$work/first_answer.sh:/first_answer.sh:ro" -v "$work/host-ca.crt:/host-ca.crt:ro" \
  --env PIP_CERT=/host-ca.crt --env SSL_CERT_FILE=/host-ca.crt \
  --env TOKENMILL_PORT="$(free_port)" --env METRICS_PORT="$(free_port)" \
  --env TOKENMILL_DIR=/root/tokenmill ${MODEL_NAME:+--env MODEL_NAME="$MODEL_NAME"} \
  --env TOKENMILL_GATEWAY_HOST=127.0.0.1 --env TOKENMILL_GATEWAY_PORT="$(free_port)" \
  "$container" -- /bin/bash /first_answer.sh | tee "$log" |
  grep -E '^fresh_start|^\[[0-9]+ s\] (setup:|.*rror)' || true
echo "fresh_start: the whole log is $log"
