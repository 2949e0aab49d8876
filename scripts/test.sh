#!/usr/bin/env bash
# The test command of sandlot (README: "Test"; CONTRIBUTING.md has quicker tiers). Run it as root from anywhere; CI
# runs it through .ci/run.
#
# First scripts/setup.sh provisions what the tests need and is missing (apt, npm, PyPI, cargo-nextest, dockerd and
# the runner images); then every check runs, each even when an earlier one failed, and the script ends with a summary
# of all of them and exits non-zero when any failed. The checks: cargo fmt --check, cargo clippy -D warnings (also
# of the sandlot binary with the `phases` feature), the jail's docs (cargo doc, links must resolve), cargo nextest run
# (profile "ci", .config/nextest.toml), and the end-to-end tests (real MCP clients and the playground in headless
# Chromium against the real binary), the load balancers' configurations and the Kubernetes manifests (checked
# offline), and three nodes behind HAProxy (tests/cluster).
# The jail's tests need root (cgroups, dedicated sandbox uids, user namespaces): they fail, not skip, without it, so
# this script refuses to start unless it runs as root.
#
# To add a check: one `check "NAME" COMMAND [ARG...]` line below (a command that needs the sandlot binary goes
# through `with_binary`; one that must run in a directory, through `in_dir DIR`).
set -uo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

step() { printf '==> %s\n' "$*"; }

[[ "$(id -u)" == 0 ]] || {
    echo "test.sh: must run as root: the jail's attack tests need cgroups and dedicated unprivileged host uids (try: sudo $0)" >&2
    exit 1
}
if ! command -v cargo >/dev/null && [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
# The suite is one pass over a checkout, so cargo's incremental caches only cost disk: with them the target directory
# is about twice the size (a CI run on a small disk ran out of space with them on).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# disk_free: what is left on the disk the target directory is on (a build that runs out of space fails obscurely).
disk_free() { mkdir -p target && df -h --output=avail target | tail -1 | tr -d ' '; }
# free_gb: the same, in whole GB, for a comparison.
free_gb() { df -BG --output=avail target | tail -1 | tr -dc '0-9'; }
printf '==> disk: %s free for target/ before setup\n' "$(disk_free)"
scripts/setup.sh || { echo "test.sh: scripts/setup.sh failed: nothing was checked" >&2; exit 1; }
printf '==> disk: %s free for target/ after setup\n' "$(disk_free)"
# What the checks take after setup, measured on a fresh clone: about 8 GB (target/ 6 GB, of which the test binaries
# are one per crate; then the container image's static build and Docker's layers).
if (( $(free_gb) < 10 )); then
    printf '==> warning: only %s GB free; the checks take about 8 GB, and a full disk fails them obscurely\n' "$(free_gb)"
fi

results=()   # "PASS|FAIL seconds name", in order
failed=0
# check NAME COMMAND [ARG...]: runs the command, records whether it passed and how long it took.
check() {
    local name="$1" started=$SECONDS status
    shift
    step "$name"
    "$@"
    status=$?
    if (( status == 0 )); then
        results+=("PASS $(( SECONDS - started ))s $name")
    else
        results+=("FAIL $(( SECONDS - started ))s $name (exit $status)")
        failed=$(( failed + 1 ))
        printf '==> FAILED: %s (exit %s)\n' "$name" "$status"
    fi
}
in_dir() { (cd "$1" && shift && "$@"); }
# The end-to-end tests use the binary the "build the sandlot binary" check made; without it they cannot run.
binary_built=no
build_binary() { cargo build --quiet --bin sandlot && binary_built=yes; }
with_binary() {
    [[ "$binary_built" == yes ]] || { echo "not run: the sandlot binary did not build" >&2; return 1; }
    "$@"
}
export SANDLOT_BIN="$PWD/target/debug/sandlot"
# The PostgreSQL cluster setup.sh started: the history's tests run against it too, and fail when it does not answer.
SANDLOT_TEST_POSTGRES_URL="$(scripts/postgres-test.sh --url)"
export SANDLOT_TEST_POSTGRES_URL
# The scientific Python environment (scripts/python-env.sh, which setup.sh runs) the plot tests run Python in.
export SANDLOT_TEST_PYTHON_ENV="${SANDLOT_PYTHON_ENV:-/opt/sandlot/python}"

check "cargo fmt --all -- --check" cargo fmt --all -- --check
check "cargo clippy --workspace --all-targets -- -D warnings" cargo clippy --workspace --all-targets -- -D warnings
# scripts/phases-jail.sh measures the sandbox's start-up step by step with this feature: it must keep building.
check "cargo clippy -p sandlot --features phases -- -D warnings" cargo clippy -p sandlot --features phases -- -D warnings
# The jail's module docs are its map for a newcomer: their links must resolve.
check "cargo doc -p sandlot-jail (private items, -D warnings)" \
    env RUSTDOCFLAGS="-D warnings" cargo doc -p sandlot-jail --no-deps --document-private-items --quiet
check "cargo nextest run --workspace --profile ci" cargo nextest run --workspace --no-fail-fast --profile ci
check "build the sandlot binary (cargo build --bin sandlot)" build_binary
check "end-to-end: Python MCP SDK 1.x (tests/e2e/python_v1)" with_binary .venv-e2e/bin/python -m pytest -q tests/e2e/python_v1
check "end-to-end: Python MCP SDK 2.x (tests/e2e/python_v2)" with_binary .venv-e2e2/bin/python -m pytest -q tests/e2e/python_v2
check "end-to-end: openai-agents' MCP client (tests/e2e/agents)" with_binary .venv-agents/bin/python -m pytest -q tests/e2e/agents
check "end-to-end: the official Baponi SDK on /p/baponi (tests/e2e/baponi)" with_binary .venv-baponi/bin/python -m pytest -q tests/e2e/baponi
check "load balancers: haproxy -c, nginx -t (deploy/haproxy, deploy/nginx, deploy/kubernetes)" scripts/check-deploy.sh balancers
check "Kubernetes manifests against the schemas, offline (deploy/kubernetes)" scripts/check-deploy.sh kubernetes
check "cluster: conversation affinity through HAProxy, three nodes (tests/cluster)" \
    with_binary .venv-e2e2/bin/python -m pytest -q -s tests/cluster
check "end-to-end: TypeScript MCP SDK (tests/e2e/ts)" with_binary in_dir tests/e2e/ts node --test
check "end-to-end: the playground and the MCP Apps views in headless Chromium (screenshots: tests/e2e/browser/artifacts/)" \
    with_binary in_dir tests/e2e/browser node --test

# Last: it makes a second (static musl) build, the suite's biggest use of disk after the first. On a short disk the
# first build goes before it: every check that needed it is done.
if (( $(free_gb) < 4 )); then
    step "disk: under 4 GB free; removing target/debug (the checks that used it are done)"
    rm -rf target/debug
fi
check "sandlot's container image: both compose files against a real MCP client (tests/image/test-image.sh)" \
    tests/image/test-image.sh

step "summary"
printf '    disk: %s free for target/ at the end\n' "$(disk_free)"
printf '    %s\n' "${results[@]}"
if (( failed > 0 )); then
    step "$failed of ${#results[@]} checks failed"
    exit 1
fi
step "all ${#results[@]} checks passed"
