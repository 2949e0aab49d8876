#!/usr/bin/env bash
# Packs the static release binary for distribution: dist/sandlot-<version>-<arch>-linux-musl.tar.gz (a directory of
# that name holding `sandlot` and README.md) and its checksum beside it, `<tarball>.sha256`, in the format
# `sha256sum -c` reads. The binary is built by scripts/release-build.sh (static, musl; it installs the musl target
# and musl-tools when missing). The archive is reproducible: sorted names, owner 0, the last commit's time.
# Usage: scripts/package.sh   (prints the tarball's path)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

binary="$(scripts/release-build.sh)"
# "path+file:///.../crates/cli#sandlot@0.1.0" -> 0.1.0
version="$(cargo pkgid -p sandlot | sed 's/.*[#@]//')"
name="sandlot-$version-$(uname -m)-linux-musl"
# A static binary has no program interpreter (no INTERP header).
if grep -q INTERP <<<"$(readelf -lW "$binary")"; then
    echo "package.sh: $binary is dynamically linked; the package must hold a static binary" >&2
    exit 1
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/$name"
install -m 0755 "$binary" "$stage/$name/sandlot"
install -m 0644 README.md "$stage/$name/README.md"
mtime="$(git log -1 --format=%ct 2>/dev/null || date +%s)"
mkdir -p dist
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - "$name" \
    | gzip -9n > "dist/$name.tar.gz"
(cd dist && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "==> dist/$name.tar.gz ($(du -h "dist/$name.tar.gz" | cut -f1)), checksum in dist/$name.tar.gz.sha256" >&2
echo "$PWD/dist/$name.tar.gz"
