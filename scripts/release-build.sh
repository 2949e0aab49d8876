#!/usr/bin/env bash
# Builds sandlot in release mode as it ships: a static binary linked against musl (scripts/static-build.sh, which
# installs the musl target and musl-tools when missing), and prints the binary's path. scripts/package.sh packs this
# binary; the benchmark scripts (scripts/bench-*.sh) measure it, so their figures stay comparable with
# docs/benchmarks.md.
# Usage: [SANDLOT_FEATURES=F,...] scripts/release-build.sh   (progress on stderr, the path on stdout; the features
# are passed on to static-build.sh)
set -euo pipefail
exec "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/static-build.sh" release
