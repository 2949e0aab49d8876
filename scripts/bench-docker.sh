#!/usr/bin/env bash
# The Docker backend's speed (issue 4's benchmark): print(1) through sandlot's Docker backend against a raw
# `docker run --rm -i runner-python` and against the native jail. Run as root with dockerd running and the runner
# images built (scripts/build-runners.sh).  Usage: scripts/bench-docker.sh [--runs N]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-docker.sh: run as root" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "bench-docker.sh: no Docker engine answers" >&2; exit 1; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_docker.py "$binary" "$@"
