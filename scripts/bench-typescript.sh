#!/usr/bin/env bash
# TypeScript at JavaScript's speed (issue 32's benchmark): tools/call console.log(1) in TypeScript (stripped in the
# server) against the same in JavaScript and bare `node -e`, on a server whose TypeScript runner is pinned to a tsx
# that does not exist; and, for the record, TypeScript through tsx (SANDLOT_TYPESCRIPT_MODE=runner). Run as root on
# an idle machine.
# Usage: scripts/bench-typescript.sh [--runs N] [--no-tsx]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-typescript.sh: run as root (cgroups)" >&2; exit 1; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_typescript.py "$binary" "$@"
