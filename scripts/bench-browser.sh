#!/usr/bin/env bash
# The browser per conversation (issue 33): a conversation's first navigate (Chromium starts in its live sandbox),
# navigate+screenshot of a warm browser, against headless Chromium run bare on the host for one screenshot. Run as
# root on an idle machine.
# Usage: scripts/bench-browser.sh [--runs N]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-browser.sh: run as root (cgroups)" >&2; exit 1; }
binary="$(scripts/release-build.sh)"
exec /usr/bin/python3 scripts/bench_browser.py "$binary" "$@"
