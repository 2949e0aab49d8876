#!/usr/bin/env bash
# Where the time of one `sandlot run` goes, step by step, without a tracer: builds sandlot's release binary with the
# `phases` feature (SANDLOT_FEATURES=phases scripts/release-build.sh; the feature writes a timestamp at each step of
# the command, the init, pid 1 and the worker to /tmp/sandlot-marks.log when SANDLOT_MARKS is set, see
# crates/core/src/marks.rs) in a temporary git worktree of each revision (each must have the feature), runs
# `python3 -c 'print(1)'`-like runs, and prints the median µs after the command's `main` at each step. With two
# revisions, runs them alternately, in a random order per pair, and prints both and the difference (how the
# figures of docs/benchmarks.md's sandbox section were measured). Run as root on an otherwise idle machine.
# Usage: scripts/phases-jail.sh [--runs N] [REV_A [REV_B]]   (default: 200 runs of HEAD)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
repo="$PWD"

[[ "$(id -u)" == 0 ]] || { echo "phases-jail.sh: run as root (cgroups)" >&2; exit 1; }
runs=200
if [[ "${1:-}" == --runs ]]; then runs="$2"; shift 2; fi
revs=("${@:-HEAD}")
work="$(mktemp -d /tmp/sandlot-phases-XXXXXX)"
cleanup() {
  for tree in "$work"/tree-*; do [[ -d "$tree" ]] && git -C "$repo" worktree remove --force "$tree"; done
  rm -rf "$work"
}
trap cleanup EXIT

binaries=()
for i in "${!revs[@]}"; do
  tree="$work/tree-$i"
  git worktree add --quiet --detach "$tree" "${revs[$i]}"
  grep -q '^phases = ' "$tree/crates/cli/Cargo.toml" \
    || { echo "phases-jail.sh: ${revs[$i]} predates the phases feature" >&2; exit 1; }
  ln -s "$repo/target" "$tree/target" # the same build cache
  binary="$(SANDLOT_FEATURES=phases "$tree/scripts/release-build.sh")"
  cp "$binary" "$work/sandlot-$i"
  binaries+=("$work/sandlot-$i")
done

echo 'print(1)' > "$work/print1.py"
log=/tmp/sandlot-marks.log
rm -f "$log"
for _ in $(seq "$runs"); do
  order=("${!binaries[@]}")
  (( ${#order[@]} == 2 && RANDOM % 2 )) && order=(1 0)
  for i in "${order[@]}"; do
    echo "tag $i" >> "$log"
    env -i PATH=/usr/bin:/bin SANDLOT_MARKS=1 SANDLOT_PYTHON=/usr/bin/python3 SANDLOT_LOG=error \
      "${binaries[$i]}" run -l python --root "$work/root" -c phases "$work/print1.py" > /dev/null
  done
done
/usr/bin/python3 scripts/phases_jail.py "$log" "${revs[@]}"
