"""The run history in PostgreSQL (SANDLOT_HISTORY_URL): two servers, each with a root of its own, and one database
list the same runs, whichever of them ran a run (issue 35, many machines); runs go on while the database is
unreachable, and the history answers again when it is back; over TCP with TLS, the server's certificate verified
(refused without the authority that signed it). The database is the tests' PostgreSQL
(scripts/postgres-test.sh; scripts/test.sh exports SANDLOT_TEST_POSTGRES_URL): without it the test fails, it does
not skip. Each test makes a database of its own and drops it after."""

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import urllib.parse

import httpx
import pytest

from conftest import SANDBOX_UIDS_FIRST, call, sandlot_binary, start_server, wait_until

TEST_POSTGRES_URL = os.environ.get("SANDLOT_TEST_POSTGRES_URL")


def psql(url, sql):
    """Runs `sql` with psql; returns what it printed (unaligned, no headers)."""
    return subprocess.run(["psql", "--no-psqlrc", "--quiet", "--tuples-only", "--no-align", "--set=ON_ERROR_STOP=1",
                           url, "--command", sql], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def history_url():
    assert TEST_POSTGRES_URL, "SANDLOT_TEST_POSTGRES_URL is unset: start scripts/postgres-test.sh and export its URL"
    database = "sandlot_e2e_" + os.urandom(6).hex()
    psql(TEST_POSTGRES_URL, f"CREATE DATABASE {database}")
    yield urllib.parse.urlsplit(TEST_POSTGRES_URL)._replace(path=f"/{database}").geturl()
    psql(TEST_POSTGRES_URL, f"DROP DATABASE {database} WITH (FORCE)")


def runs(server, conversation):
    response = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": conversation}, headers=server.auth)
    assert response.status_code == 200, response.text
    return response.json()["runs"]


def test_a_run_made_on_one_node_is_listed_on_the_other(tmp_path, history_url):
    # Each server its own half of this session's sandbox uids: they run side by side.
    halves = [f"{SANDBOX_UIDS_FIRST}-{SANDBOX_UIDS_FIRST + 499}", f"{SANDBOX_UIDS_FIRST + 500}-{SANDBOX_UIDS_FIRST + 999}"]
    starts = [start_server(tmp_path / name, {"SANDLOT_HISTORY_URL": history_url, "SANDLOT_SANDBOX_UIDS": uids})
              for name, uids in zip(["a", "b"], halves)]
    servers, begun = [], []
    try:
        for start in starts:
            begun.append(start)
            servers.append(next(start))
        a, b = servers
        on_a = call(a, {"conversationId": "shared", "language": "python", "code": "print('from a')"})
        assert on_a["outcome"] == "ok"
        [listed] = runs(b, "shared")
        assert (listed["id"], listed["state"], listed["outcome"], listed["caller"]) == (
            on_a["runId"], "finished", "ok", "api-token")
        record = httpx.get(f"{b.base_url}/v1/runs/{on_a['runId']}", headers=b.auth).json()
        assert record == listed
        output = httpx.get(f"{b.base_url}/v1/runs/{on_a['runId']}/output", headers=b.auth).json()
        assert (output["runId"], output["stdout"], output["stderr"]) == (on_a["runId"], "from a\n", "")

        # The database ends both servers' connections (as a restart of PostgreSQL does): the next run and listing
        # connect again, at once. Each server has one for the history, and its event relay's two (a listener, and a
        # publisher, which announces the listener as it connects) are named apart.
        database = urllib.parse.urlsplit(history_url).path.lstrip("/")
        ended = psql(TEST_POSTGRES_URL, "SELECT application_name || ' ' || count(pg_terminate_backend(pid)) "
                     f"FROM pg_stat_activity WHERE datname = '{database}' "
                     "GROUP BY application_name ORDER BY application_name")
        assert ended.splitlines() == ["sandlot 2", "sandlot-relay 4"], ended

        # And the other way: both nodes list both runs, newest first.
        on_b = call(b, {"conversationId": "shared", "language": "bash", "code": "echo from b"})
        assert on_b["outcome"] == "ok"
        for server in (a, b):
            assert [run["id"] for run in runs(server, "shared")] == [on_b["runId"], on_a["runId"]]
        # Each server's files stay its own: the history is shared, the roots are not.
        assert (tmp_path / "a" / "shared").is_dir() and (tmp_path / "b" / "shared").is_dir()
    finally:
        for start in begun:
            next(start, None)  # runs start_server's clean-up (terminate and wait)


def test_runs_go_on_while_the_database_is_unreachable_and_the_history_comes_back(tmp_path, history_url):
    database = urllib.parse.urlsplit(history_url).path.lstrip("/")
    start = start_server(tmp_path / "a", {"SANDLOT_HISTORY_URL": history_url})
    server = next(start)
    try:
        before = call(server, {"conversationId": "outage", "language": "bash", "code": "echo before"})
        # No new connection to the database, and the server's ended: as if PostgreSQL were down.
        psql(TEST_POSTGRES_URL, f"ALTER DATABASE {database} ALLOW_CONNECTIONS false; "
             f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")
        during = call(server, {"conversationId": "outage", "language": "bash", "code": "echo during"})
        assert (during["stdout"], during["outcome"]) == ("during\n", "ok"), "the run runs, unrecorded"
        response = httpx.get(f"{server.base_url}/v1/runs", headers=server.auth)
        assert (response.status_code, response.json()["error"]) == (500, "internal"), response.text
        # The log says why (read from the server's stderr by a thread: soon, not at once).
        def unreachable():
            return "the history database is unreachable" in "".join(server.stderr_tail)
        wait_until(unreachable, 10)
        assert unreachable(), list(server.stderr_tail)

        psql(TEST_POSTGRES_URL, f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        # Within the backoff (at most 5 s between attempts; the bound is for a loaded machine).
        def answers():
            return httpx.get(f"{server.base_url}/v1/runs", headers=server.auth).status_code == 200
        wait_until(answers, 30)
        assert answers(), list(server.stderr_tail)
        after = call(server, {"conversationId": "outage", "language": "bash", "code": "echo after"})
        assert [run["id"] for run in runs(server, "outage")] == [after["runId"], before["runId"]]
    finally:
        next(start, None)  # runs start_server's clean-up (terminate and wait)


@pytest.fixture
def tls_postgres():
    """A PostgreSQL of this test's own that takes TLS over TCP on loopback, its certificate (for `localhost`) signed
    by a test authority: (its URL without sslmode, the authority's PEM file). In a directory of /tmp's own, which
    the postgres user can reach (pytest's are root's only)."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="sandlot-tls-postgres-"))
    bin_dir = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    ca, key, cert = directory / "ca.pem", directory / "server.key", directory / "server.pem"
    ssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run([*ssl, "-keyout", directory / "ca.key", "-out", ca, "-subj", "/CN=sandlot test CA"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", directory / "s.csr",
                    "-subj", "/CN=localhost"], check=True, capture_output=True)
    (directory / "ext").write_text("subjectAltName=DNS:localhost\n")
    subprocess.run(["openssl", "x509", "-req", "-in", directory / "s.csr", "-CA", ca, "-CAkey", directory / "ca.key",
                    "-CAcreateserial", "-days", "1", "-out", cert, "-extfile", directory / "ext"], check=True,
                   capture_output=True)
    shutil.chown(directory, "postgres")
    for path in directory.iterdir():
        shutil.chown(path, "postgres")
    key.chmod(0o600)
    as_postgres = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_postgres, bin_dir / "initdb", "-D", directory / "data", "-U", "postgres", "--auth=trust"],
                   check=True, capture_output=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={directory} -c ssl=on "
               f"-c ssl_cert_file={cert} -c ssl_key_file={key}")
    subprocess.run([*as_postgres, bin_dir / "pg_ctl", "-D", directory / "data", "-l", directory / "log", "-w",
                    "-o", options, "start"], check=True, capture_output=True)
    yield f"postgresql://postgres@localhost:{port}/postgres", ca
    subprocess.run([*as_postgres, bin_dir / "pg_ctl", "-D", directory / "data", "-m", "immediate", "stop"],
                   capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)


def test_the_history_reaches_postgresql_over_verified_tls(tmp_path, tls_postgres):
    url, ca = tls_postgres
    start = start_server(tmp_path / "tls", {"SANDLOT_HISTORY_URL": f"{url}?sslmode=require", "SSL_CERT_FILE": str(ca)})
    server = next(start)
    try:
        made = call(server, {"conversationId": "tls", "language": "bash", "code": "echo over tls"})
        assert [run["id"] for run in runs(server, "tls")] == [made["runId"]]
        used = psql(url + "?sslmode=disable", "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a "
                    "USING (pid) WHERE a.application_name LIKE 'sandlot%'")
        assert used == "t", "a connection of the server (its history's, its event relay's) is not TLS"
    finally:
        next(start, None)
    # Without the test authority the certificate is not trusted: the server does not start, and says why.
    env = dict(os.environ, SANDBOX_ROOT=str(tmp_path / "untrusted"), MCP_API_TOKEN="untrusted-token-0123456789",
               SANDLOT_HISTORY_URL=f"{url}?sslmode=require", MCP_HTTP_ADDR="127.0.0.1:0")
    env.pop("SSL_CERT_FILE", None)
    refused = subprocess.run([sandlot_binary(), "serve"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "certificate" in refused.stderr.lower(), refused.stderr[-2000:]
