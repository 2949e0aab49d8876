#!/usr/bin/env bash
# The test command of sandlot (README: "How to test"). Run it as root from anywhere; CI runs it through .ci/run.
#
# On a fresh Debian 12 machine it installs what the tests need (rustup: the musl target sandlot builds for; apt:
# musl-tools, bubblewrap hyperfine iproute2 procps, docker.io and debootstrap, then starts dockerd and builds the
# runner images with scripts/build-runners.sh; chromium for the playground's browser test; npm: tsx, the TypeScript
# runner for Node 20, and playwright-core; PyPI: the official MCP SDK for the end-to-end tests), makes sure
# cargo-nextest is there, then runs cargo fmt --check, cargo clippy -D warnings, cargo nextest run (profile "ci",
# .config/nextest.toml) and the end-to-end tests (pytest tests/e2e: real MCP clients against the real binary).
# The jail's tests need root (cgroups, a dedicated sandbox uid, user namespaces): they fail, not skip, without it,
# so this script refuses to start unless it runs as root.
set -euo pipefail

step() { printf '==> %s\n' "$*"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

apt_updated=no
apt_install() {
    step "installing $* (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    if [[ "$apt_updated" == no ]]; then
        apt-get update
        apt_updated=yes
    fi
    apt-get install -y --no-install-recommends "$@"
}

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

step "checking privileges"
if [[ "$(id -u)" != 0 ]]; then
    die "must run as root: the jail's attack tests need cgroups and a dedicated unprivileged host uid (try: sudo $0)"
fi

step "checking the interpreters the tests run in the sandbox"
[[ -x /usr/bin/python3 ]] || die "/usr/bin/python3 is missing (Debian package python3); the tests run Python with it"
command -v node >/dev/null || die "node is not on PATH; the JavaScript and TypeScript tests need it"
command -v bash >/dev/null || die "bash is not on PATH"

step "checking Debian packages: bubblewrap hyperfine iproute2 procps"
missing=()
for package in bubblewrap hyperfine iproute2 procps; do
    # grep reads a captured string: a pipe from dpkg could end in SIGPIPE and, with pipefail, a false "missing".
    if ! grep -qx 'Status: install ok installed' <<<"$(dpkg -s "$package" 2>/dev/null || true)"; then
        missing+=("$package")
    fi
done
if (( ${#missing[@]} > 0 )); then
    apt_install "${missing[@]}"
fi

step "checking the TypeScript runner (tsx)"
if ! command -v tsx >/dev/null; then
    if ! command -v npm >/dev/null; then
        apt_install npm
        hash -r
        command -v npm >/dev/null || die "tsx is missing and npm could not be installed to install it (npm install -g tsx)"
    fi
    step "installing tsx (npm install -g tsx)"
    npm install -g tsx
    hash -r
    if ! command -v tsx >/dev/null; then
        PATH="$(npm prefix -g)/bin:$PATH"
        command -v tsx >/dev/null || die "npm installed tsx but it is not on PATH (npm prefix -g: $(npm prefix -g))"
    fi
fi

step "checking the Rust toolchain"
if ! command -v cargo >/dev/null && [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
command -v cargo >/dev/null || die "cargo is not on PATH (install Rust 1.85 or newer with rustfmt and clippy)"
cargo fmt --version >/dev/null 2>&1 || die "rustfmt is missing (rustup component add rustfmt)"
cargo clippy --version >/dev/null 2>&1 || die "clippy is missing (rustup component add clippy)"
# sandlot builds for musl (.cargo/config.toml): the target's standard library, and musl-gcc for the C in ring,
# SQLite and mimalloc.
target="$(scripts/build-target.sh)"
# grep reads a captured string, as for dpkg above: a pipe could end in SIGPIPE and, with pipefail, a false "missing".
if ! grep -qx "$target" <<<"$(rustup target list --installed 2>/dev/null || true)"; then
    step "installing the Rust standard library for $target (rustup target add)"
    rustup target add "$target"
fi
command -v musl-gcc >/dev/null || apt_install musl-tools
if ! cargo nextest --version >/dev/null 2>&1; then
    step "installing cargo-nextest (cargo install cargo-nextest --locked)"
    cargo install cargo-nextest --locked
fi

step "versions: $(rustc --version); $(cargo nextest --version 2>/dev/null | sed -n 1p)"
step "versions: python $(/usr/bin/python3 --version 2>&1 | cut -d' ' -f2); node $(node --version); tsx $(tsx --version 2>/dev/null | sed -n '1s/^tsx //p')"

step "end-to-end client environments (.venv-e2e: mcp 1.x; .venv-e2e2: mcp 2.x; tests/e2e/ts: the TypeScript SDK)"
python=""
for candidate in python3.11 python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        python="$(command -v "$candidate")"
        break
    fi
done
[[ -n "$python" ]] || die "no Python 3.10+ with venv for the end-to-end tests (apt-get install python3-venv)"
python_env() { # python_env DIR MCP_VERSION HTTP_MODULE
    if [[ ! -x "$1/bin/python" ]] || ! "$1/bin/python" -c "import mcp, pytest, anyio, $3; import importlib.metadata as m; assert m.version('mcp') == '$2'" 2>/dev/null; then
        rm -rf "$1"
        "$python" -m venv "$1"
        "$1/bin/pip" install --quiet --disable-pip-version-check "mcp==$2" pytest anyio httpx
    fi
}
python_env .venv-e2e 1.30.0 httpx
python_env .venv-e2e2 2.3.0 httpx2
command -v npm >/dev/null || apt_install npm
(cd tests/e2e/ts && npm ci --silent --no-audit --no-fund)

step "browser for the playground test (Debian's chromium, driven by playwright-core from npm; no browser download)"
[[ -x /usr/bin/chromium ]] || apt_install chromium
(cd tests/e2e/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --silent --no-audit --no-fund)

step "Docker engine and runner images (the Docker backend's tests)"
missing=()
for package in docker.io debootstrap docker-compose; do
    if ! grep -qx 'Status: install ok installed' <<<"$(dpkg -s "$package" 2>/dev/null || true)"; then
        missing+=("$package")
    fi
done
if (( ${#missing[@]} > 0 )); then
    apt_install "${missing[@]}"
fi
if ! docker info >/dev/null 2>&1; then
    step "starting dockerd (log: /tmp/sandlot-dockerd.log)"
    nohup dockerd >/tmp/sandlot-dockerd.log 2>&1 &
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || die "dockerd did not start (see /tmp/sandlot-dockerd.log)"
fi
scripts/build-runners.sh

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

# scripts/phases-jail.sh measures the sandbox's start-up step by step with this patch: it must keep applying.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    step "scripts/phases-jail.patch applies to this checkout"
    git apply --check scripts/phases-jail.patch || die "scripts/phases-jail.patch no longer applies: update its marks"
fi

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo nextest run --workspace --no-fail-fast --profile ci"
cargo nextest run --workspace --no-fail-fast --profile ci

step "end-to-end tests with real MCP clients against the real binary"
cargo build --quiet --bin sandlot
export SANDLOT_BIN="$PWD/target/$target/debug/sandlot"
.venv-e2e/bin/python -m pytest -q tests/e2e/python_v1
.venv-e2e2/bin/python -m pytest -q tests/e2e/python_v2
step "sandlot's container image: both compose files against a real MCP client (tests/image/test-image.sh)"
tests/image/test-image.sh
(cd tests/e2e/ts && node --test)
step "the playground in headless Chromium (screenshots: tests/e2e/browser/artifacts/)"
(cd tests/e2e/browser && node --test)

step "all checks passed"
