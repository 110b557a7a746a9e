#!/usr/bin/env bash
# Builds the CPU image (docker/Dockerfile) and smoke-tests it, on a machine with no Docker
# engine and no image registry: podman and buildah with chroot isolation, on a Debian base
# image made here with debootstrap (the host's release, so the Dockerfile's package names
# exist) and slimmed like the official debian:*-slim images.
#
#   docker/build-and-smoke.sh            # base (once), image, smoke test; prints timings
#
# The smoke test (docker/smoke-in-container.sh, run with `buildah run`) starts the server on
# MODEL (below) from models/ (scripts/setup fetches it) and the gateway, checks the
# image's HEALTHCHECK and the gateway's /health, runs one completion and stops both.
#
# Environment: IMAGE (default localhost/tokenmill:cpu), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), MODEL (a file in models/, default the SmolLM2 GGUF: the
# tests' model, small and fast, not the images' default), SMOKE_ONLY=1 (skip the build),
# DOCKER_BUILD_ARGS (more `podman build` arguments), PREBUILT (a folder of executables built
# on this host, e.g. build/bin: the image takes them instead of compiling its own,
# docker/Dockerfile's BINARIES=prebuilt; CI does so, having just built them).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/tokenmill:cpu}
MODEL=${MODEL:-SmolLM2-135M-Instruct.Q4_1.gguf}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RELEASE=$(. /etc/os-release && echo "$VERSION_CODENAME")
BASE=localhost/debian:${RELEASE}-slim-local
TOOLS=(podman buildah debootstrap)

log() { echo "build-and-smoke: $*" >&2; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

install_tools() {
  local missing=()
  for p in "${TOOLS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

# A minimal Debian root file system as an image, slimmed as debuerreotype slims the official
# ones: no documentation, manual pages or translations, now or from later apt installs.
make_base() {
  if $sudo podman image exists "$BASE"; then
    log "base image $BASE exists"
    return
  fi
  local root
  root=$(mktemp -d)
  log "debootstrap $RELEASE from $MIRROR into $root"
  $sudo debootstrap --variant=minbase "$RELEASE" "$root" "$MIRROR" >"$root.log" 2>&1 ||
    { tail -n 20 "$root.log" >&2; exit 1; }
  $sudo tee "$root/etc/dpkg/dpkg.cfg.d/docker-slim" >/dev/null <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
  $sudo tee "$root/etc/apt/apt.conf.d/docker-clean" >/dev/null <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Binary::apt::APT::Keep-Downloaded-Packages "false";
EOF
  $sudo tee "$root/etc/apt/sources.list" >/dev/null <<EOF
deb $MIRROR $RELEASE main
deb $MIRROR $RELEASE-updates main
deb ${MIRROR%/debian}/debian-security $RELEASE-security main
EOF
  $sudo find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  $sudo rm -rf "$root"/usr/share/{man,info,locale,lintian}/* "$root"/var/cache/apt/* \
    "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/tmp/*
  $sudo tar -C "$root" -c . | $sudo podman import --quiet - "$BASE" >/dev/null
  $sudo rm -rf "$root" "$root.log"
  log "base image $BASE: $($sudo podman image inspect --format '{{.Size}}' "$BASE") bytes"
}

# PREBUILT's executables, stripped, and the Debian packages holding the libraries they link
# (this host is of the base image's release, so the names are the image's) in folder $1.
stage_prebuilt() {
  local exe lib
  mkdir -p "$1/bin"
  for exe in tokenmill-server tokenmill-gateway tokenmill-health; do
    [ -x "$PREBUILT/$exe" ] || { log "$PREBUILT/$exe is missing: build it first"; exit 1; }
    strip -o "$1/bin/$exe" "$PREBUILT/$exe"
  done
  for lib in $(ldd "$1"/bin/* | awk '/=> \//{print $3}' | sort -u); do
    dpkg -S "*/$(basename "$lib")" | head -n 1 | cut -d: -f1
  done | sort -u > "$1/runtime-packages"
}

build_image() {
  local args=(--build-arg BASE_IMAGE="$BASE") prebuilt=""
  if [ -n "${PREBUILT:-}" ]; then
    prebuilt=$(mktemp -d)
    stage_prebuilt "$prebuilt"
    args+=(--build-arg BINARIES=prebuilt --build-context prebuilt="$prebuilt")
    log "image from the executables in $PREBUILT"
  fi
  # --format docker: the OCI format has no HEALTHCHECK. --pull=never: no registry here.
  # shellcheck disable=SC2086
  $sudo podman build --isolation=chroot --pull=never --format docker \
    "${args[@]}" -f docker/Dockerfile -t "$IMAGE" ${DOCKER_BUILD_ARGS:-} .
  [ -z "$prebuilt" ] || rm -rf "$prebuilt"
  log "image $IMAGE: $($sudo podman image inspect --format '{{.Size}}' "$IMAGE") bytes"
}

free_port() {  # a TCP port nothing on this host listens on
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    ss -Htln "sport = :$port" | grep -q . || { echo "$port"; return; }
  done
}

smoke() {
  [ -r "models/$MODEL" ] || { log "models/$MODEL is missing: run scripts/setup"; exit 1; }
  local healthcheck container
  # The image's HEALTHCHECK, as Docker would run it: ["CMD-SHELL", "command line"].
  healthcheck=$($sudo podman image inspect --format '{{index .Config.Healthcheck.Test 1}}' "$IMAGE")
  container=$($sudo buildah from --pull-never "$IMAGE")
  local status=0
  # chroot isolation shares the host's network: the ports must be free here, on 127.0.0.1.
  $sudo buildah run --isolation=chroot \
    -v "$PWD/models:/models:ro" -v "$PWD/docker/smoke-in-container.sh:/smoke.sh:ro" \
    --env TOKENMILL_MODEL="/models/$MODEL" --env TOKENMILL_HOST=127.0.0.1 \
    --env TOKENMILL_PORT="$(free_port)" --env TOKENMILL_METRICS_PORT="$(free_port)" \
    --env TOKENMILL_GATEWAY_HOST=127.0.0.1 --env TOKENMILL_GATEWAY_PORT="$(free_port)" \
    --env HEALTHCHECK="$healthcheck" \
    "$container" -- /bin/sh /smoke.sh || status=$?
  $sudo buildah rm "$container" >/dev/null
  return "$status"
}

timed() {  # name command...: runs it, records its wall time
  local start=$SECONDS
  "$@"
  timings+=("$1: $((SECONDS - start)) s")
}

timings=()
timed install_tools
timed make_base
[ "${SMOKE_ONLY:-}" = 1 ] || timed build_image
timed smoke
log "passed; wall times: ${timings[*]}"
