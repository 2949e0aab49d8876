#!/usr/bin/env bash
# Builds sandlot as a static binary linked against musl (`--target <arch>-unknown-linux-musl`; the default build is
# the host's, see .cargo/config.toml) in the given profile, and prints the binary's path. Installs what the musl
# build needs when it is missing: the target's standard library (rustup target add) and musl-gcc for the C in ring,
# SQLite and mimalloc (apt-get install musl-tools, as root). scripts/release-build.sh is the release build that
# ships; tests/image/test-image.sh puts the debug one in the container image.
# Usage: [SANDLOT_FEATURES=F,...] scripts/static-build.sh debug|release   (progress on stderr, the path on stdout)
# SANDLOT_FEATURES: cargo features of the sandlot crate to build with (scripts/phases-jail.sh sets `phases`).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

profile="${1:-}"
case "$profile" in
    debug) flags=() ;;
    release) flags=(--release) ;;
    *) echo "usage: scripts/static-build.sh debug|release" >&2; exit 2 ;;
esac
if [[ -n "${SANDLOT_FEATURES:-}" ]]; then flags+=(--features "$SANDLOT_FEATURES"); fi
target="$(uname -m)-unknown-linux-musl"
# grep reads a captured string: a pipe could end in SIGPIPE and, with pipefail, a false "missing".
if ! grep -qx "$target" <<<"$(rustup target list --installed 2>/dev/null || true)"; then
    echo "==> rustup target add $target" >&2
    rustup target add "$target" >&2
fi
if ! command -v musl-gcc >/dev/null; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "static-build.sh: musl-gcc is missing: run \`apt-get install musl-tools\` as root" >&2
        exit 1
    fi
    echo "==> apt-get install musl-tools" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends musl-tools >&2; then
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends musl-tools >&2
    fi
fi
echo "==> cargo build ${flags[*]} --target $target" >&2
cargo build "${flags[@]}" --quiet --locked --bin sandlot --target "$target"
echo "${CARGO_TARGET_DIR:-$PWD/target}/$target/$profile/sandlot"
