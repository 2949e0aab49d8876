#!/usr/bin/env bash
# Starts (once) the PostgreSQL cluster the history's PostgreSQL tests use, and prints its URL: a cluster of its own
# (Debian's PostgreSQL binaries, initdb + pg_ctl as the `postgres` user) in /tmp/sandlot-test-postgres, listening
# on a unix socket there only (no TCP port to clash with), trusting local connections: it holds nothing but tests'
# throwaway databases. Idempotent: a cluster already running is left as is. scripts/setup.sh runs it, and
# scripts/test.sh exports its URL as SANDLOT_TEST_POSTGRES_URL.  Usage (root): scripts/postgres-test.sh [--url]
set -euo pipefail

dir=/tmp/sandlot-test-postgres
url="postgresql://postgres@%2Ftmp%2Fsandlot-test-postgres/postgres"
if [[ "${1:-}" == --url ]]; then
    printf '%s\n' "$url"
    exit 0
fi
[[ "$(id -u)" == 0 ]] || { echo "postgres-test.sh: must run as root (it runs the cluster as the postgres user)" >&2; exit 1; }
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[[ -x "$bin/pg_ctl" ]] || { echo "postgres-test.sh: no PostgreSQL server (apt-get install postgresql)" >&2; exit 1; }
as_postgres() { runuser -u postgres -- "$@"; }

if ! as_postgres "$bin/pg_isready" -q -h "$dir" 2>/dev/null; then
    install -d -o postgres -g postgres -m 0755 "$dir"
    [[ -f "$dir/data/PG_VERSION" ]] || as_postgres "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
    as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c max_connections=200" start >/dev/null
fi
as_postgres "$bin/pg_isready" -q -h "$dir"
printf '%s\n' "$url"
