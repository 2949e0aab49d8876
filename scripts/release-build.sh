#!/usr/bin/env bash
# Builds sandlot in release mode, as it ships (a static binary for the target .cargo/config.toml names), and prints
# the binary's path. The benchmark scripts use it: scripts/bench-*.sh.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
target="$(scripts/build-target.sh)"
echo "==> cargo build --release (target $target)" >&2
cargo build --release --quiet
echo "$PWD/target/$target/release/sandlot"
