#!/usr/bin/env bash
# Start-up latency of the native jail against bare python3 and bubblewrap (issue 2's benchmark).
# Builds sandlot in release mode (the static musl binary, scripts/release-build.sh), installs bubblewrap if missing, and prints
# one table: p50/p95 of `python3 -c 'print(1)'` bare, through `sandlot run`, and through bwrap, with ratios.
# Run as root (the jail's cgroups need it), on an otherwise idle machine.  Usage: scripts/bench-jail.sh [--runs N]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

[[ "$(id -u)" == 0 ]] || { echo "bench-jail.sh: run as root (cgroups)" >&2; exit 1; }
command -v bwrap >/dev/null || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }

binary="$(scripts/release-build.sh)"
"$binary" doctor >&2 || true
exec /usr/bin/python3 scripts/bench_jail.py "$binary" "$@"
