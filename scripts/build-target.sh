#!/usr/bin/env bash
# Prints the target triple sandlot is built for: the one .cargo/config.toml names (binaries land in
# target/<triple>/). Used by scripts/test.sh and scripts/release-build.sh.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
sed -n 's/^target = "\(.*\)"$/\1/p' .cargo/config.toml
