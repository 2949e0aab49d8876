#!/usr/bin/env bash
# The MCP server's speed (issue 3's benchmark): tools/call print(1) over HTTP against bare python3 and `sandlot
# run`, and tools/list requests per second at 16 and 64 connections (wrk). Run as root on an idle machine.
# Usage: scripts/bench-server.sh [--runs N] [--seconds S]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-server.sh: run as root (cgroups)" >&2; exit 1; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_server.py "$binary" "$@"
