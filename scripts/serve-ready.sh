#!/usr/bin/env bash
# Starts `BINARY serve` on 127.0.0.1:PORT and returns as soon as `GET /healthz` answers 200, then kills the server
# (SIGKILL; its sandboxes and zygote die with it) and reaps it: timing this script times a server's start to ready.
# scripts/bench-startup.sh runs it. Polls every millisecond with bash's /dev/tcp (no process per poll).
# Usage: scripts/serve-ready.sh BINARY [PORT]   (root: $SANDLOT_READY_ROOT, default /tmp/sandlot-serve-ready)
set -euo pipefail
binary="$1"
port="${2:-18089}"
root="${SANDLOT_READY_ROOT:-/tmp/sandlot-serve-ready}"
mkdir -p "$root"
# A FIFO nobody writes to: `read -t` on it is a sleep without a process.
[[ -p "$root/.tick" ]] || mkfifo "$root/.tick"
exec 9<>"$root/.tick"

MCP_HTTP_ADDR="127.0.0.1:$port" SANDBOX_ROOT="$root" MCP_API_TOKEN=serve-ready SANDLOT_LOG=error \
    "$binary" serve 2>/dev/null &
server=$!
ready() {
    local status
    { printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && read -r status <&3; } 2>/dev/null \
        3<>"/dev/tcp/127.0.0.1/$port" || return 1
    [[ "$status" == *" 200 "* ]]
}
until ready; do
    kill -0 "$server" 2>/dev/null || { echo "serve-ready.sh: $binary serve exited before it was ready" >&2; exit 1; }
    read -r -t 0.001 -u 9 || true
done
exec 2>/dev/null # no "Killed" notice from bash
kill -KILL "$server"
wait "$server" 2>/dev/null || true
