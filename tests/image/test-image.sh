#!/usr/bin/env bash
# The container image of sandlot, tested for real (docs/container.md): builds it (scripts/build-image.sh, with the
# debug binary of scripts/static-build.sh unless SANDLOT_IMAGE_BINARY names one), then for each way of running it
#   1. native: deploy/compose.yaml (the jail inside the container, with the privileges that file grants);
#   2. docker-socket: deploy/compose.docker-socket.yaml (the Docker backend through the host's socket, the data root
#      a nosuid,nodev bind of a temporary host directory at the same path);
# starts it with docker-compose, waits for /healthz, checks `sandlot doctor` inside, runs a real MCP client
# (tests/image/client.py: Python, Bash and TypeScript runs, /data kept between runs, downloads, no network),
# removes the container and makes a new one on the same volume, checks /data survived, then removes the container,
# its volume and the directory.
# Also checks that without those privileges the image refuses honestly: `sandlot doctor` exits 1 and names them.
# Needs root, a running Docker engine, docker-compose (or the compose plugin) and the end-to-end venv (.venv-e2e,
# made by scripts/test.sh; or SANDLOT_E2E_PYTHON).  Usage: tests/image/test-image.sh
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.."

step() { printf '==> image: %s\n' "$*"; }
die() { printf 'test-image.sh: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "must run as root (the docker-socket variant mounts its data root nosuid,nodev)"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd)"
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose=(docker-compose)
else
    die "neither docker compose nor docker-compose is installed (apt-get install docker-compose)"
fi
python="${SANDLOT_E2E_PYTHON:-$PWD/.venv-e2e/bin/python}"
"$python" -c 'import mcp, httpx' 2>/dev/null || die "$python lacks the MCP SDK (scripts/test.sh makes .venv-e2e)"

export SANDLOT_IMAGE="${SANDLOT_IMAGE:-sandlot:test}"
if [[ -z "${SANDLOT_IMAGE_BINARY:-}" ]]; then
    SANDLOT_IMAGE_BINARY="$(scripts/static-build.sh debug)"
fi
export SANDLOT_IMAGE_BINARY
step "building $SANDLOT_IMAGE (binary $SANDLOT_IMAGE_BINARY)"
scripts/build-image.sh >/dev/null 2>/tmp/sandlot-build-image.log || { cat /tmp/sandlot-build-image.log >&2; die "scripts/build-image.sh failed"; }

project="sandlot-image-test-$$"
host_root=""
state="$(mktemp)" # the download URL the client's write phase got, for its read phase
cleanup() {
    rm -f "$state"
    "${compose[@]}" -p "$project" -f deploy/compose.yaml down -v --timeout 20 >/dev/null 2>&1 || true
    "${compose[@]}" -p "$project" -f deploy/compose.docker-socket.yaml down -v --timeout 20 >/dev/null 2>&1 || true
    if [[ -n "$host_root" ]]; then
        umount "$host_root" 2>/dev/null || true
        rm -rf "$host_root"
    fi
}
trap cleanup EXIT

port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export MCP_API_TOKEN="image-test-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export SANDLOT_PUBLISH="127.0.0.1:$port" PUBLIC_BASE_URL="http://127.0.0.1:$port" SANDLOT_LOG=warn
url="http://127.0.0.1:$port"

wait_healthy() { # wait_healthy COMPOSE_FILE: /healthz answers 200 within 60 s (a loaded machine starts slowly)
    for _ in $(seq 120); do
        if "$python" -c "import httpx, sys; sys.exit(httpx.get('$url/healthz', timeout=2).status_code != 200)" 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    "${compose[@]}" -p "$project" -f "$1" logs >&2 || true
    die "$1: /healthz did not answer 200 within 60 s"
}

exercise() { # exercise COMPOSE_FILE REQUIRED_LINE [DOCTOR_ARGS...]: start, doctor, client, re-create, client, remove
    local file="$1" required="$2"
    step "$file: up"
    "${compose[@]}" -p "$project" -f "$file" up -d
    wait_healthy "$file"
    step "$file: sandlot doctor inside the container"
    local report
    report="$("${compose[@]}" -p "$project" -f "$file" exec -T sandlot sandlot doctor "${@:3}")" \
        || { printf '%s\n' "$report" >&2; die "$file: sandlot doctor failed inside the container"; }
    printf '%s\n' "$report" | sed 's/^/    /'
    grep -Eq "$required" <<<"$report" || die "$file: doctor's report has no line matching $required"
    step "$file: MCP client (python, bash, typescript; /data between runs; downloads; no network)"
    "$python" tests/image/client.py "$url" "$MCP_API_TOKEN" write "$state"
    step "$file: a new container on the same volume; /data is still there"
    local before
    before="$("${compose[@]}" -p "$project" -f "$file" ps -q sandlot)"
    "${compose[@]}" -p "$project" -f "$file" down --timeout 20 >/dev/null 2>&1
    "${compose[@]}" -p "$project" -f "$file" up -d >/dev/null 2>&1
    [[ "$("${compose[@]}" -p "$project" -f "$file" ps -q sandlot)" != "$before" ]] || die "$file: the container was not re-created"
    wait_healthy "$file"
    "$python" tests/image/client.py "$url" "$MCP_API_TOKEN" read "$state"
    "${compose[@]}" -p "$project" -f "$file" down -v --timeout 20 >/dev/null 2>&1
}

step "without added privileges, doctor fails and names what is missing"
report="$(docker run --rm "$SANDLOT_IMAGE" doctor 2>&1)" && die "doctor passed in a container without privileges:
$report"
grep -q '^FAILED   jail' <<<"$report" || die "doctor without privileges did not fail the jail line:
$report"
grep -q '^FAILED   container .*CAP_SYS_ADMIN' <<<"$report" || die "doctor without privileges did not name CAP_SYS_ADMIN:
$report"

# The jail with every layer, cgroups included (the entrypoint made the container's own writable).
exercise deploy/compose.yaml '^ok +cgroups '

host_root="$(mktemp -d /var/tmp/sandlot-image-test.XXXXXX)"
# A mount of its own, first with setuid and devices allowed whatever the filesystem it lies on, so the refusal below
# is certain to be tested.
mount --bind "$host_root" "$host_root"
mount -o remount,bind,suid,dev "$host_root"
step "docker-socket: a data root that is not a nosuid,nodev mount is refused, not used"
refused="$(docker run -i --rm -v /var/run/docker.sock:/var/run/docker.sock -v "$host_root:$host_root" \
    -e SANDBOX_ROOT="$host_root" -e SANDLOT_CONTAINER_SETUP=0 "$SANDLOT_IMAGE" run --backend docker --language bash \
    <<<'echo ran' 2>&1)" && die "a run went ahead on a data root without nosuid,nodev: $refused"
grep -q "mount $host_root nosuid,nodev: Operation not permitted" <<<"$refused" \
    || die "the refusal does not name the nosuid,nodev mount: $refused"
# The path the Docker backend gives the engine is the host's: make it a nosuid,nodev mount there, as
# deploy/compose.docker-socket.yaml tells operators to.
mount -o remount,bind,nosuid,nodev "$host_root"
export SANDLOT_HOST_ROOT="$host_root"
exercise deploy/compose.docker-socket.yaml '^ok +docker +engine .*python=' --backend docker

step "all image checks passed"
