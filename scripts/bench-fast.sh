#!/usr/bin/env bash
# Issue 32's benchmark: stateless tools/call print(1) and `import pandas` against bare python, with Python runs
# forked from the server's templates and with each run starting its interpreter, interleaved; then the templates'
# memory. Run as root on an idle machine.
# Usage: scripts/bench-fast.sh [--runs N] [--python PATH]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-fast.sh: run as root (cgroups)" >&2; exit 1; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_fast.py "$binary" "$@"
