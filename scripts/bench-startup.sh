#!/usr/bin/env bash
# Start-up of the two builds of sandlot (docs/benchmarks.md, "Start-up of the host build and the static build"):
# the host build that `cargo run --release` makes (glibc, dynamically linked) and the static musl binary that
# scripts/package.sh ships. For each: `sandlot run -l python print(1)` (with Debian's /usr/bin/python3) and a server's
# start until /healthz answers (scripts/serve-ready.sh), timed with hyperfine (installed if missing).
# Run as root on an otherwise idle machine.  Usage: scripts/bench-startup.sh [--runs N]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
[[ "$(id -u)" == 0 ]] || { echo "bench-startup.sh: run as root (cgroups)" >&2; exit 1; }
runs=100
if [[ "${1:-}" == --runs ]]; then runs="$2"; fi
command -v hyperfine >/dev/null || { apt-get update -qq && apt-get install -y -qq hyperfine >/dev/null; }

echo "==> cargo build --release (the host build)" >&2
cargo build --release --quiet --locked --bin sandlot
gnu="$PWD/target/release/sandlot"
musl="$(scripts/release-build.sh)"
work="$(mktemp -d /tmp/sandlot-startup-XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/print1.py"
# The environment of scripts/bench_jail.py: no pyenv shim on PATH, Debian's python3 pinned.
clean="env -i PATH=/usr/bin:/bin SANDLOT_PYTHON=/usr/bin/python3 SANDLOT_LOG=error"
run() { echo "$clean $1 run -l python --root $work/root $work/print1.py"; }
hyperfine -N --warmup 10 --runs "$runs" -n "run, host build" "$(run "$gnu")" -n "run, static musl" "$(run "$musl")"
hyperfine -N --warmup 3 --runs "$(( runs / 4 + 1 ))" \
    -n "serve to /healthz, host build" "$clean $PWD/scripts/serve-ready.sh $gnu 18089" \
    -n "serve to /healthz, static musl" "$clean $PWD/scripts/serve-ready.sh $musl 18090"
