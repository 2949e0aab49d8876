#!/usr/bin/env bash
# Throughput under load (issue 5's benchmark): 1,000 tools/call run_code print(1) from 32 concurrent clients against
# `sandlot serve` (release build, default queue: 2 x cores runs at once), beside 1,000 bare `python3 -c 'print(1)'`
# run two at a time. Prints runs/s, p50/p99 latency, errors and the server's peak RSS. Run as root on an idle machine.
# Usage: scripts/bench-load.sh [--calls N] [--clients C]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-load.sh: run as root (cgroups)" >&2; exit 1; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_load.py "$binary" "$@"
