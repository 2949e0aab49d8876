#!/usr/bin/env bash
# The suite on a loaded machine, as a newcomer gets it: clones this checkout's HEAD into a fresh directory, keeps
# every core busy with a CPU-bound process of normal priority, and runs scripts/test.sh there N times in a row
# (default 3), each run's summary kept. Exits non-zero when any run failed. Run as root, as scripts/test.sh.
# Usage: scripts/soak.sh [RUNS]   (the clone: $SOAK_DIR, default /tmp/sandlot-soak; removed first)
set -uo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
runs="${1:-3}"
dir="${SOAK_DIR:-/tmp/sandlot-soak}"

rm -rf "$dir"
git clone --quiet --no-hardlinks "$PWD" "$dir" || exit 1
printf '==> soak: %s runs of scripts/test.sh in %s at %s, beside %s busy cores\n' \
    "$runs" "$dir" "$(git -C "$dir" rev-parse --short HEAD)" "$(nproc)"

hogs=()
for _ in $(seq "$(nproc)"); do
    sha256sum /dev/zero &
    hogs+=("$!")
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT

failed=0
for run in $(seq "$runs"); do
    started=$SECONDS
    if (cd "$dir" && scripts/test.sh >"$dir/soak-$run.log" 2>&1); then verdict=PASS; else verdict=FAIL; failed=1; fi
    printf '==> run %s: %s in %ss (log: %s)\n' "$run" "$verdict" "$(( SECONDS - started ))" "$dir/soak-$run.log"
    sed -n '/^==> summary/,$p' "$dir/soak-$run.log"
done
exit "$failed"
