#!/usr/bin/env bash
# Live sandboxes (issue 31's benchmark): a session call of print(1) against bare python3, a query of a data frame a
# previous call loaded against reloading it, and an idle live sandbox's memory. Run as root on an idle machine.
# Usage: scripts/bench-session.sh [--runs N]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-session.sh: run as root (cgroups)" >&2; exit 1; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_session.py "$binary" "$@"
