#!/usr/bin/env bash
# Builds the container image of sandlot itself (deploy/Dockerfile; docs/container.md), tagged $SANDLOT_IMAGE
# (default sandlot:latest), and prints its tag.
# - The base is the runner images' (scripts/build-runners.sh, run first: it makes the local debootstrap base
#   `sandlot-base:bookworm` when SANDLOT_RUNNER_BASE names no registry image, installs tsx from npm into
#   runners/.build/tsx, and builds the runner images the Docker-socket variant of the container uses).
# - The binary is built on the host and copied in: $SANDLOT_IMAGE_BINARY if set (tests/image/test-image.sh passes the
#   debug build), else the static release build of scripts/release-build.sh.
# The build context is staged in deploy/.build/ (ignored by git), so the image build sends a few MB, not target/.
# Needs a running Docker engine.  Usage: scripts/build-image.sh
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

step() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build-image.sh: %s\n' "$*" >&2; exit 1; }
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd)"
export DOCKER_BUILDKIT=0 # the classic builder, as for the runner images (no buildx; API 1.41)

tag="${SANDLOT_IMAGE:-sandlot:latest}"
base="${SANDLOT_RUNNER_BASE:-sandlot-base:bookworm}"
scripts/build-runners.sh >&2

binary="${SANDLOT_IMAGE_BINARY:-}"
if [[ -z "$binary" ]]; then
    binary="$(scripts/release-build.sh)"
fi
[[ -x "$binary" ]] || die "no sandlot binary at $binary"
# A dynamically linked binary would need the host's C library in the image: refuse it rather than fail at start.
if ! file -b "$binary" 2>/dev/null | grep -q 'static'; then
    command -v file >/dev/null || die "the file command is missing (apt-get install file)"
    die "$binary is not statically linked (scripts/release-build.sh builds the static musl one)"
fi

context=deploy/.build
step "staging $context (binary $binary)"
rm -rf "$context"
mkdir -p "$context"
cp "$binary" "$context/sandlot"
# The release profile keeps debug info (82 MB); the image needs the symbols for backtraces only (18 MB).
if command -v strip >/dev/null; then
    strip --strip-debug "$context/sandlot"
fi
cp -r runners/.build/tsx "$context/tsx"
cp deploy/entrypoint.sh "$context/entrypoint.sh"
step "docker build $tag (base $base)"
docker build --quiet --build-arg "BASE=$base" -f deploy/Dockerfile -t "$tag" "$context" >/dev/null
echo "$tag"
