#!/usr/bin/env bash
# Provisions a machine for sandlot's tests (scripts/test.sh runs it first; run it alone to prepare a machine). It
# installs only what is missing, so a second run is quick (a few seconds: package and version checks, Docker's build
# cache for the runner images):
# - apt: bubblewrap hyperfine iproute2 openssl curl procps (the jail's tests and benchmarks), npm, chromium (the playground's
#   browser test), docker.io, debootstrap and docker-compose (the Docker backend's and the container image's tests),
#   python3-requests (the egress tests use `requests` in the system Python), postgresql (the history's PostgreSQL
#   store is tested against a real server);
# - apt: haproxy and nginx (Debian 12's 2.6 and 1.22: scripts/check-deploy.sh checks deploy/'s load balancer
#   configurations with them, tests/cluster runs both in front of three nodes, each its own process; the services
#   the packages install are not used: on a host with systemd, `systemctl disable --now haproxy nginx`);
# - npm: tsx (the TypeScript runner for Node 20), and `npm ci` in tests/e2e/ts (the TypeScript MCP SDK) and
#   tests/e2e/browser (playwright-core; no browser download, it drives Debian's chromium);
# - PyPI: the official MCP SDK for the end-to-end tests, mcp 1.x in .venv-e2e and mcp 2.x (with fastmcp 4.x) in
#   .venv-e2e2;
# - PyPI: the scientific Python environment the sandboxed Python runs in the plot tests (scripts/python-env.sh, at
#   $SANDLOT_PYTHON_ENV or /opt/sandlot/python: numpy, pandas, matplotlib);
# - PyPI: kubernetes-validate (pinned, with the Kubernetes schemas in the package) in .venv-k8s, for
#   scripts/check-deploy.sh kubernetes;
# - cargo: cargo-nextest (rustfmt and clippy must come with the toolchain: rustup component add);
# - starts the tests' PostgreSQL cluster (scripts/postgres-test.sh: a unix socket in /tmp/sandlot-test-postgres);
# - starts dockerd when no engine answers (log: /tmp/sandlot-dockerd.log) and builds the runner images
#   (scripts/build-runners.sh).
# The tests need no musl target: they build for the host. scripts/package.sh installs it for the static binary.
# Run as root on Debian 12 (apt, dockerd).  Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

step() { printf '==> %s\n' "$*"; }
die() { printf 'setup.sh: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "must run as root: it installs packages and starts dockerd (try: sudo $0)"

apt_updated=no
apt_install() {
    step "installing $* (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    if [[ "$apt_updated" == no ]]; then
        apt-get update -qq
        apt_updated=yes
    fi
    apt-get install -y -qq --no-install-recommends "$@"
}

# The Debian packages of a list that are not installed (one dpkg-query for all of them).
missing_packages() {
    # grep reads a captured string: a pipe from dpkg could end in SIGPIPE and, with pipefail, a false "missing".
    local installed package
    installed="$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "$@" 2>/dev/null || true)"
    for package in "$@"; do
        grep -qx "$package installed" <<<"$installed" || printf '%s\n' "$package"
    done
}

step "checking the interpreters the tests run in the sandbox"
[[ -x /usr/bin/python3 ]] || die "/usr/bin/python3 is missing (Debian package python3); the tests run Python with it"
command -v node >/dev/null || die "node is not on PATH; the JavaScript and TypeScript tests need it"

step "checking Debian packages"
mapfile -t missing < <(missing_packages bubblewrap hyperfine iproute2 openssl curl procps docker.io debootstrap docker-compose e2fsprogs mount python3-requests haproxy nginx postgresql)
# npm and chromium may come from elsewhere (NodeSource's nodejs bundles npm): the commands are what counts.
command -v npm >/dev/null || missing+=(npm)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
if (( ${#missing[@]} > 0 )); then
    apt_install "${missing[@]}"
    hash -r
fi

step "checking the TypeScript runner (tsx)"
if ! command -v tsx >/dev/null; then
    step "installing tsx (npm install -g tsx)"
    npm install -g --silent --no-audit --no-fund tsx
    hash -r
    command -v tsx >/dev/null \
        || die "npm installed tsx but it is not on PATH (add $(npm prefix -g)/bin to PATH)"
fi

step "checking the Rust toolchain"
if ! command -v cargo >/dev/null && [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
command -v cargo >/dev/null || die "cargo is not on PATH (install Rust 1.95 or newer with rustfmt and clippy)"
cargo fmt --version >/dev/null 2>&1 || die "rustfmt is missing (rustup component add rustfmt)"
cargo clippy --version >/dev/null 2>&1 || die "clippy is missing (rustup component add clippy)"
if ! cargo nextest --version >/dev/null 2>&1; then
    step "installing cargo-nextest (cargo install cargo-nextest --locked)"
    cargo install cargo-nextest --locked
fi

step "end-to-end client environments (.venv-e2e: mcp 1.x; .venv-e2e2: mcp 2.x; npm ci in tests/e2e/ts, tests/e2e/browser)"
python=""
for candidate in python3.11 python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        python="$(command -v "$candidate")"
        break
    fi
done
if [[ -z "$python" ]]; then
    apt_install python3-venv
    python=/usr/bin/python3
fi
python_env() { # python_env DIR MCP_VERSION HTTP_MODULE [NAME==VERSION ...]: more pinned packages
    local dir="$1" mcp="$2" module="$3" pins="" pin
    shift 3
    for pin in "$@"; do pins+="assert m.version('${pin%%==*}') == '${pin##*==}'; "; done
    if [[ ! -x "$dir/bin/python" ]] || ! "$dir/bin/python" -c "import mcp, pytest, anyio, $module; import importlib.metadata as m; assert m.version('mcp') == '$mcp'; $pins" 2>/dev/null; then
        step "making $dir (mcp==$mcp, pytest, anyio, httpx $*)"
        rm -rf "$dir"
        "$python" -m venv "$dir"
        "$dir/bin/pip" install --quiet --disable-pip-version-check "mcp==$mcp" pytest anyio httpx "$@"
    fi
}
python_env .venv-e2e 1.30.0 httpx
# fastmcp 4.x: the second 2026-07-28 client of tests/e2e/python_v2 (it runs on the same mcp 2.x).
python_env .venv-e2e2 2.3.0 httpx2 fastmcp==4.2.3
# .venv-agents: openai-agents (its own mcp 2.x) for tests/e2e/agents, pinned like the SDKs above.
.venv-agents/bin/python -c "import importlib.metadata as m; assert m.version('openai-agents') == '0.24.0'; import pytest, anyio, httpx" 2>/dev/null \
    || { rm -rf .venv-agents && "$python" -m venv .venv-agents && .venv-agents/bin/pip install --quiet --disable-pip-version-check openai-agents==0.24.0 pytest anyio httpx; }
# .venv-baponi: the official Baponi SDK for tests/e2e/baponi (the Baponi profile's REST twin), pinned.
.venv-baponi/bin/python -c "import importlib.metadata as m; assert m.version('baponi') == '0.5.1'; import pytest, httpx" 2>/dev/null \
    || { rm -rf .venv-baponi && "$python" -m venv .venv-baponi && .venv-baponi/bin/pip install --quiet --disable-pip-version-check baponi==0.5.1 pytest httpx; }
# .venv-k8s: kubernetes-validate for scripts/check-deploy.sh (deploy/kubernetes/ against the schemas it carries).
.venv-k8s/bin/python -c "import importlib.metadata as m; assert m.version('kubernetes-validate') == '1.37.0'; import yaml" 2>/dev/null \
    || { rm -rf .venv-k8s && "$python" -m venv .venv-k8s && .venv-k8s/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0; }
# npm ci wipes node_modules and installs again; skip it while what it installed is newer than the lock file.
npm_ci() { # npm_ci DIR
    if [[ ! "$1/node_modules/.package-lock.json" -nt "$1/package-lock.json" ]]; then
        step "npm ci in $1"
        (cd "$1" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --silent --no-audit --no-fund)
    fi
}
npm_ci tests/e2e/ts
npm_ci tests/e2e/browser

step "scientific Python environment for the sandbox (scripts/python-env.sh)"
scripts/python-env.sh >/dev/null

step "the tests' PostgreSQL cluster (scripts/postgres-test.sh)"
scripts/postgres-test.sh >/dev/null

step "Docker engine and runner images (the Docker backend's tests)"
if ! docker info >/dev/null 2>&1; then
    step "starting dockerd (log: /tmp/sandlot-dockerd.log)"
    nohup dockerd >/tmp/sandlot-dockerd.log 2>&1 &
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || die "dockerd did not start (see /tmp/sandlot-dockerd.log)"
fi
scripts/build-runners.sh >/dev/null

step "setup done: $(rustc --version); $(cargo nextest --version 2>/dev/null | sed -n 1p); python $(/usr/bin/python3 --version 2>&1 | cut -d' ' -f2); node $(node --version); tsx $(tsx --version 2>/dev/null | sed -n '1s/^tsx //p')"
