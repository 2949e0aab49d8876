"""The HTTP contract against the real binary and the real jail, with plain HTTP requests (no SDK): stateless
calls without initialize, failing, timed-out and runner-less runs as results with isError, downloads that refuse
tampered, expired and symlinked paths, and authentication failures."""

import json
import urllib.parse

import httpx

from conftest import RunEvents


def rpc(server, method, params=None, headers=None, request_id=1):
    body = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    response = httpx.post(server.mcp_url, json=body, timeout=60,
                          headers={**server.auth, "Accept": "application/json, text/event-stream", **(headers or {})})
    return response


def run_code(server, **arguments):
    response = rpc(server, "tools/call", {"name": "sandbox.run_code", "arguments": arguments})
    assert response.status_code == 200, response.text
    return response.json()["result"]


def test_stateless_tools_call_without_initialize(server):
    result = run_code(server, conversationId="http", language="python", code="print(6 * 7)")
    assert result["isError"] is False
    assert result["structuredContent"]["stdout"] == "42\n"
    data = result["structuredContent"]
    assert result["content"][0]["text"] == f"outcome: ok, exit code 0, {data['durationMs']} ms\n42\n"


def test_non_zero_exit_is_a_failed_result(server):
    result = run_code(server, conversationId="http", language="bash", code="echo out; echo err >&2; exit 4")
    data = result["structuredContent"]
    assert result["isError"] is True
    assert (data["success"], data["exitCode"], data["timedOut"], data["output"]) == (False, 4, False, "out\nerr\n")


def test_timeout_is_a_failed_result_with_timed_out(server):
    result = run_code(server, conversationId="http", language="python", code="import time\nprint('start', flush=True)\ntime.sleep(30)", timeoutSeconds=1)
    data = result["structuredContent"]
    assert result["isError"] is True
    assert (data["success"], data["exitCode"], data["timedOut"]) == (False, 124, True)
    assert data["output"] == "start\ntimed out after 1 s; the run was killed"


def test_stdin_and_env_reach_the_program(server):
    code = "import os, sys\nprint(os.environ['GREETING'], sys.stdin.read())"
    result = run_code(server, conversationId="http", language="python", code=code, stdin="world", env={"GREETING": "hello"})
    assert result["structuredContent"]["stdout"] == "hello world\n"


def test_tampered_expired_and_symlinked_downloads_are_refused(server):
    code = "ln -s /etc/passwd /data/leak; echo secret-data > /data/real.txt"
    data = run_code(server, conversationId="dl", language="bash", code=code)["structuredContent"]
    assert [f["name"] for f in data["files"]] == ["real.txt"], "the symlink is not listed"
    url = data["files"][0]["url"]
    assert httpx.get(url).content == b"secret-data\n"
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    base = f"{parts.scheme}://{parts.netloc}"
    flipped = "1" if query["sig"].endswith("0") else "0"
    tampered = f"{base}{parts.path}?exp={query['exp']}&sig={query['sig'][:-1]}{flipped}"
    expired = f"{base}{parts.path}?exp=1&sig={query['sig']}"
    other = f"{base}/files/dl/leak?exp={query['exp']}&sig={query['sig']}"
    for bad in (tampered, expired, other):
        assert httpx.get(bad).status_code == 403, bad
    # Even a correctly signed URL for the symlink gets nothing.
    # The expiring form's message (crates/core/src/signer.rs): a tag, then id, path (length-prefixed) and exp.
    message = b"sandlot-file-url-v2\0"
    for part in (b"dl", b"leak"):
        message += len(part).to_bytes(8, "big") + part
    message += int(query["exp"]).to_bytes(8, "big")
    leak_sig = __import__("hmac").new(server.file_secret.encode(), message, "sha256").hexdigest()
    response = httpx.get(f"{base}/files/dl/leak?exp={query['exp']}&sig={leak_sig}")
    assert response.status_code == 404
    assert b"root:" not in response.content


def test_authentication_failures(server):
    assert httpx.post(server.mcp_url, json={}).status_code == 401
    response = httpx.post(server.mcp_url, json={}, headers={"Authorization": "Bearer nope"})
    assert (response.status_code, response.json()) == (401, {"error": "unauthorized", "message": "invalid bearer token"})
    # Past the default limit (10 wrong credentials a minute) a wrong one gets 429; the right one is never refused.
    statuses = [httpx.post(server.mcp_url, json={}, headers={"Authorization": "Bearer nope"}).status_code
                for _ in range(11)]
    assert statuses[-1] == 429, statuses
    blocked = httpx.post(server.mcp_url, json={}, headers={"Authorization": "Bearer nope"})
    assert blocked.status_code == 429
    assert 1 <= int(blocked.headers["retry-after"]) <= 60
    assert rpc(server, "tools/list").status_code == 200


def test_run_events_stream_for_one_conversation(server):
    listener = RunEvents(server, "ev").start()
    run_code(server, conversationId="other", language="bash", code="true")
    run_code(server, conversationId="ev", language="bash", code="exit 3")
    seen = listener.wait()
    assert [e["method"] for e in seen] == ["notifications/sandlot/run_started", "notifications/sandlot/run_finished"]
    started, finished = (e["params"] for e in seen)
    assert (started["conversationId"], started["language"]) == ("ev", "bash")
    assert (finished["conversationId"], finished["success"], finished["exitCode"], finished["termination"]) == (
        "ev", False, 3, {"kind": "exited", "code": 3})
    assert finished["runId"] == started["runId"]
