#!/usr/bin/env bash
# Builds the Docker runner images runner-python, runner-javascript, runner-typescript and runner-bash from
# runners/Dockerfile-*, then runner-live (the live sandboxes' image, every language in one) on top of runner-python. Each Dockerfile takes its base as a build argument:
# - SANDLOT_RUNNER_BASE=<image> uses that image (a registry image such as debian:bookworm-slim; the Dockerfiles
#   install the interpreter with apt when the base lacks it);
# - otherwise a local base `sandlot-base:bookworm` is used, made once (and kept) with debootstrap from Debian's
#   packages and `docker import`: for machines with no image registry, like ours.
# tsx, the TypeScript runner, is installed from npm on the host into runners/.build/tsx and copied into its image.
# runner-python carries the scientific environment of scripts/python-env.sh (numpy, pandas, matplotlib, the plt.show()
# hook) at the same path as the native runner's, /opt/sandlot/python (or $SANDLOT_PYTHON_ENV):
# - by default it is built (or only checked) on the host with scripts/python-env.sh and copied in, so the build needs
#   no PyPI; the host's /usr/bin/python3 must be the image's Python (3.11 on Debian 12, both bases here);
# - SANDLOT_PYTHON_ENV_IN_IMAGE=1 builds it inside the image with pip instead (PyPI reachable from docker build).
# The image is labelled sandbox.packages="<the pins>", which the Docker backend reports in sandbox_list_runners; the
# build checks the image's environment has exactly them.
# Needs a running Docker engine (and debootstrap for the local base).  Usage: scripts/build-runners.sh
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

step() { printf '==> %s\n' "$*"; }
die() { printf 'build-runners.sh: %s\n' "$*" >&2; exit 1; }
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd)"
# The classic builder: it needs no buildx plugin and works with the API 1.41 of Debian's docker.io.
export DOCKER_BUILDKIT=0

base="${SANDLOT_RUNNER_BASE:-}"
if [[ -z "$base" ]]; then
    base="sandlot-base:bookworm"
    if ! docker image inspect "$base" >/dev/null 2>&1; then
        command -v debootstrap >/dev/null || die "debootstrap is needed to make the local base (apt-get install debootstrap)"
        mirror="${SANDLOT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
        rootfs="$(mktemp -d)"
        trap 'rm -rf "$rootfs"' EXIT
        step "debootstrap bookworm (python3, nodejs, bash) from $mirror"
        debootstrap --variant=minbase --include=python3,nodejs,bash,ca-certificates bookworm "$rootfs" "$mirror" >/dev/null
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        step "docker import -> $base"
        tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
    fi
fi

tsx_version="4.23.15"
if [[ ! -f runners/.build/tsx/node_modules/tsx/package.json ]] \
    || ! grep -q "\"version\": \"$tsx_version\"" runners/.build/tsx/node_modules/tsx/package.json; then
    step "npm install tsx@$tsx_version into runners/.build/tsx"
    rm -rf runners/.build/tsx
    mkdir -p runners/.build/tsx
    npm install --prefix runners/.build/tsx --silent --no-audit --no-fund "tsx@$tsx_version" >/dev/null
fi

python_env="${SANDLOT_PYTHON_ENV:-/opt/sandlot/python}"
empty="$(mktemp -d)"
trap 'rm -rf "$empty" ${rootfs:+"$rootfs"}' EXIT
if [[ "${SANDLOT_PYTHON_ENV_IN_IMAGE:-0}" == 1 ]]; then
    step "runner-python: its Python environment is built in the image with pip"
    env_source="$empty"
else
    step "scientific Python environment on the host (scripts/python-env.sh $python_env)"
    scripts/python-env.sh "$python_env" >/dev/null
    env_source="$python_env"
fi
# runner-python's context, streamed: runners/, python-env.sh, and the environment as python-env/ (its test suites left
# out: a quarter of its size). Only "." and "./..." names come from the environment, so only they are renamed.
python_context() {
    tar -c --exclude=tests -C runners Dockerfile-python entrypoint.sh -C "$PWD/scripts" python-env.sh \
        -C "$env_source" --transform='s,^\.\(/\|$\),python-env\1,' .
}

for language in python javascript typescript bash; do
    step "docker build runner-$language (base $base)"
    if [[ "$language" == python ]]; then
        python_context | docker build --quiet --build-arg "BASE=$base" --build-arg "PYTHON_ENV=$python_env" \
            --label "sandbox.packages=$(scripts/python-env.sh --pins)" -f Dockerfile-python -t runner-python - >/dev/null
    else
        docker build --quiet --build-arg "BASE=$base" -f "runners/Dockerfile-$language" -t "runner-$language" runners >/dev/null
    fi
done
# Labelled sandbox.live=true (and sandbox.runner empty, so it is no one-language runner); only esbuild is added.
step "docker build runner-live (base runner-python)"
docker build --quiet --build-arg "BASE=runner-python" -f runners/Dockerfile-live -t runner-live runners >/dev/null
docker image prune --force --filter label=sandbox.runner=true >/dev/null
docker image prune --force --filter label=sandbox.live=true >/dev/null
docker images --filter label=sandbox.runner=true --format '{{.Repository}}:{{.Tag}}  {{.Size}}'
docker images --filter label=sandbox.live=true --format '{{.Repository}}:{{.Tag}}  {{.Size}}'
