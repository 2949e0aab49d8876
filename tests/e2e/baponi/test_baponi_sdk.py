"""The official Baponi Python SDK (`baponi==0.5.1`, unmodified) against `sandlot serve`, with
`base_url=<server>/p/baponi`: execute with and without a thread (files under /home/baponi persist only with one),
NDJSON streaming, execution status, the Files API through its signed URLs (threads and volumes), volumes in runs at
/data/<slug>, and HTTP errors mapped to the SDK's exception classes, the 429 of repeated wrong keys included
(docs/profiles.md, "Baponi: REST and Files API", "Baponi: volumes").

Run: `.venv-baponi/bin/python -m pytest -q tests/e2e/baponi` (as root, after `cargo build --bin sandlot`; the venv is
made by scripts/setup.sh)."""

import os

import httpx
import pytest
from baponi import Baponi
from baponi._events import OutputEvent, ResultEvent, StatusEvent
from baponi.exceptions import (
    APIValidationError,
    AuthenticationError,
    BaponiError,
    ForbiddenError,
    RateLimitError,
    ThreadBusyError,
)
from conftest import start_server

# The SDK warns that a base URL without https sends the key in plaintext: expected on loopback.
pytestmark = pytest.mark.filterwarnings("ignore:Base URL .* does not use HTTPS")


@pytest.fixture
def client(server):
    with Baponi(api_key=server.token, base_url=f"{server.base_url}/p/baponi", max_retries=0) as client:
        yield client


def test_execute_without_and_with_a_thread(client):
    result = client.execute("print(6 * 7)")
    assert (result.success, result.stdout, result.stderr, result.exit_code, result.error) == (True, "42\n", "", 0, None)

    failed = client.execute("import sys; sys.stderr.write('bad'); sys.exit(3)")
    assert (failed.success, failed.stdout, failed.stderr, failed.exit_code, failed.error) == (False, "", "bad", 3, None)

    bash = client.execute("echo hi; pwd", language="bash")
    assert bash.stdout == "hi\n/data\n", bash

    # Without a thread nothing persists.
    client.execute("open('/home/baponi/note.txt', 'w').write('x')")
    gone = client.execute("import os; print(os.path.exists('/home/baponi/note.txt'))")
    assert gone.stdout == "False\n", gone

    # With one, /home/baponi does; the scratch working directory does not.
    write = "open('/home/baponi/data.json', 'w').write('[1, 2, 3]'); open('scratch.txt', 'w').write('s')"
    assert client.execute(write, thread_id="e2e-thread").success
    read = client.execute(
        "import json, os; print(sum(json.load(open('/home/baponi/data.json'))), os.path.exists('scratch.txt'))",
        thread_id="e2e-thread",
    )
    assert read.stdout == "6 False\n", read


def test_timeout_is_reported_as_baponi_does(client):
    result = client.execute("import time; time.sleep(30)", timeout=1)
    assert (result.success, result.error) == (False, "timeout"), result


def test_streaming_gives_live_events_and_the_result(client):
    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)"
    with client.execute_stream(code, thread_id="e2e-stream") as stream:
        events = list(stream)
        result = stream.get_final_result()
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    assert isinstance(events[0], StatusEvent) and events[0].trace_id.startswith("trc_"), events[0]
    assert "".join(e.data for e in events if isinstance(e, OutputEvent) and e.stream == "stdout") == "0\n1\n2\n"
    assert isinstance(events[-1], ResultEvent) and events[-1].status == "success", events[-1]
    assert (result.success, result.stdout) == (True, "0\n1\n2\n")

    status = client.get_execution(stream.trace_id)
    assert (status.trace_id, status.status, status.exit_code, status.stdout) == (stream.trace_id, "success", 0, "0\n1\n2\n")
    assert status.created_at and status.completed_at, status

    with client.reconnect_stream(stream.trace_id) as replay:
        replayed = list(replay)
        assert replay.get_final_result() == result


def test_a_busy_thread_is_409_and_a_running_execution_can_be_cancelled(client):
    with client.execute_stream("import time; time.sleep(30)", thread_id="e2e-busy", timeout=60) as stream:
        first = next(iter(stream))
        assert isinstance(first, StatusEvent), first
        with pytest.raises(ThreadBusyError) as busy:
            client.execute("print(1)", thread_id="e2e-busy")
        assert (busy.value.status_code, busy.value.error_type) == (409, "conflict")
        cancelled = stream.cancel()
        assert (cancelled.trace_id, cancelled.status) == (stream.trace_id, "cancelled")
        result = stream.until_done()
    assert result.success is False
    assert client.get_execution(stream.trace_id).status == "cancelled"


def test_files_list_download_and_upload_through_signed_urls(client):
    assert client.execute("open('/home/baponi/report.csv', 'w').write('a,b\\n1,2\\n')", thread_id="e2e-files").success

    files = client.list_files(id="e2e-files")
    assert [(f.path, f.size) for f in files] == [("report.csv", 8)]

    signed = client.download_url(id="e2e-files", path="report.csv")
    got = httpx.request(signed.method, signed.url, headers={h.name: h.value for h in signed.headers})
    assert (got.status_code, got.content) == (200, b"a,b\n1,2\n")

    payload = b"uploaded bytes"
    signed = client.upload_url(id="e2e-files", path="in/up.bin", content_length=len(payload))
    put = httpx.request(signed.method, signed.url, headers={h.name: h.value for h in signed.headers}, content=payload)
    assert put.status_code in (200, 201), put.text
    seen = client.execute("print(open('/home/baponi/in/up.bin').read())", thread_id="e2e-files")
    assert seen.stdout == "uploaded bytes\n", seen
    assert sorted(f.path for f in client.list_files(id="e2e-files", path="in")) == ["in/up.bin"]


def test_errors_map_to_the_sdks_exceptions(server, client):
    with Baponi(api_key="wrong-key", base_url=f"{server.base_url}/p/baponi", max_retries=0) as wrong:
        with pytest.raises(AuthenticationError) as auth:
            wrong.list_files(id="any")
        assert auth.value.status_code == 401

    with pytest.raises(APIValidationError) as invalid:
        client.list_files(source="disk", id="x")
    assert (invalid.value.status_code, invalid.value.error_type) == (400, "validation_error")

    with pytest.raises(BaponiError) as missing:
        client.download_url(id="e2e-none", path="nothing.txt")
    assert (missing.value.status_code, missing.value.error_type) == (404, "not_found")

    with pytest.raises(BaponiError) as unknown:
        client.get_execution("trc_0000000000000000")
    assert unknown.value.status_code == 404


def test_repeated_wrong_keys_get_429_mapped_to_the_rate_limit_error(server):
    with Baponi(api_key="wrong-key", base_url=f"{server.base_url}/p/baponi", max_retries=0) as wrong:
        for _ in range(3):
            with pytest.raises(AuthenticationError):
                wrong.list_files(id="any")
        with pytest.raises(RateLimitError) as limited:
            wrong.list_files(id="any")
    assert limited.value.status_code == 429
    assert limited.value.retry_after is not None and 0 < limited.value.retry_after <= 60, limited.value


@pytest.fixture
def volumes(tmp_path):
    docs, work = tmp_path / "docs", tmp_path / "work"
    for directory in (docs, work):
        directory.mkdir()
        os.chmod(directory, 0o755)
    (docs / "guides").mkdir(mode=0o755)
    (docs / "readme.md").write_text("# docs\n")
    (docs / "guides" / "start.md").write_text("start\n")
    return docs, work


@pytest.fixture
def volume_server(root, volumes):
    docs, work = volumes
    yield from start_server(root, {"SANDLOT_BAPONI_VOLUMES": f"docs={docs}:ro,work={work}:rw"})


@pytest.fixture
def volume_client(volume_server):
    base_url = f"{volume_server.base_url}/p/baponi"
    with Baponi(api_key=volume_server.token, base_url=base_url, max_retries=0) as client:
        yield client


def test_runs_see_volumes_at_data_slug_read_only_unless_rw(volume_client, volumes):
    docs, work = volumes
    code = """
import os
print(open('/data/docs/readme.md').read(), end='')
try:
    open('/data/docs/new.txt', 'w').write('x')
    print('docs WROTE')
except OSError as e:
    print('docs', e.strerror)
open('/data/work/out.txt', 'w').write('from a run')
print(sorted(os.listdir('/data')))
"""
    result = volume_client.execute(code)
    assert result.stdout == "# docs\ndocs Read-only file system\n['docs', 'work']\n", result
    assert not (docs / "new.txt").exists()
    assert (work / "out.txt").read_text() == "from a run"


def test_volume_files_list_download_and_upload(volume_client, volumes):
    docs, work = volumes
    listed = volume_client.list_files(source="volume", id="docs")
    assert [(f.path, f.size) for f in listed] == [("guides/start.md", 6), ("readme.md", 7)]
    assert [f.path for f in volume_client.list_files(source="volume", id="docs", path="guides")] == ["guides/start.md"]

    signed = volume_client.download_url(source="volume", id="docs", path="readme.md")
    got = httpx.request(signed.method, signed.url, headers={h.name: h.value for h in signed.headers})
    assert (got.status_code, got.content) == (200, b"# docs\n")

    with pytest.raises(ForbiddenError) as read_only:
        volume_client.upload_url(source="volume", id="docs", path="new.txt", content_length=1)
    assert (read_only.value.status_code, read_only.value.error_type) == (403, "forbidden")

    payload = b"uploaded to a volume"
    signed = volume_client.upload_url(source="volume", id="work", path="in/up.txt", content_length=len(payload))
    put = httpx.request(signed.method, signed.url, headers={h.name: h.value for h in signed.headers}, content=payload)
    assert put.status_code in (200, 201), put.text
    assert (work / "in" / "up.txt").read_bytes() == payload
    seen = volume_client.execute("print(open('/data/work/in/up.txt').read())")
    assert seen.stdout == "uploaded to a volume\n", seen

    with pytest.raises(BaponiError) as unknown:
        volume_client.list_files(source="volume", id="other")
    assert (unknown.value.status_code, unknown.value.error_type) == (404, "not_found")
