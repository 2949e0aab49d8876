"""Runs as first-class objects, seen by real clients: live output as MCP log messages (stdout and stderr told
apart) and as run_output events on /mcp/events; every run in the history (REST /v1/runs and MCP resources), with its
caller, metadata, code hash and outcome."""

import hashlib
import json
import time

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from pydantic import AnyUrl

from conftest import RunEvents, call, start_server

CODE = ("import sys, time\nfor i in range(5):\n    print('out', i, flush=True)\n    print('err', i, file=sys.stderr, "
        "flush=True)\n    time.sleep(0.1)\n")


@pytest.fixture
def server_storing_code(root):
    yield from start_server(root, {"SANDLOT_STORE_CODE": "true"})


@pytest.mark.anyio
async def test_output_arrives_as_log_messages_with_the_stream_named(server):
    messages = []

    async def on_log(params):
        messages.append((time.monotonic(), params.level, params.logger, params.data))

    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.set_logging_level("info")
            result = await session.call_tool(
                "sandbox.run_code", {"conversationId": "logs", "language": "python", "code": CODE})
            finished = time.monotonic()
    content = result.structuredContent
    assert content["success"] is True and content["outcome"] == "ok"
    assert all(at <= finished for at, *_ in messages), "a log message came after the result"
    assert {(level, logger) for _, level, logger, _ in messages} == {("info", "sandlot"), ("warning", "sandlot")}
    stdout = "".join(d["text"] for _, level, _, d in messages if d["stream"] == "stdout" and level == "info")
    stderr = "".join(d["text"] for _, level, _, d in messages if d["stream"] == "stderr" and level == "warning")
    assert (stdout, stderr) == (content["stdout"], content["stderr"])
    assert stdout == "".join(f"out {i}\n" for i in range(5))


@pytest.mark.anyio
async def test_a_warning_level_lets_only_stderr_through(server):
    messages = []

    async def on_log(params):
        messages.append(params.data["stream"])

    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.set_logging_level("warning")
            await session.call_tool("sandbox.run_code", {"conversationId": "logs", "language": "python", "code": CODE})
    assert messages and set(messages) == {"stderr"}


def test_events_carry_the_output_between_start_and_finish(server):
    listener = RunEvents(server, "events-output").start()
    result = call(server, {"conversationId": "events-output", "language": "python", "code": CODE})
    events = listener.wait()
    methods = [e["method"] for e in events]
    assert methods[0] == "notifications/sandlot/run_started" and methods[-1] == "notifications/sandlot/run_finished"
    output = [e["params"] for e in events[1:-1]]
    assert set(methods[1:-1]) == {"notifications/sandlot/run_output"}
    run_id = result["runId"]
    assert {(o["runId"], o["conversationId"]) for o in output} == {(run_id, "events-output")}
    assert [o["seq"] for o in output] == list(range(len(output)))
    assert "".join(o["data"] for o in output if o["stream"] == "stdout") == result["stdout"]
    assert "".join(o["data"] for o in output if o["stream"] == "stderr") == result["stderr"]


def test_the_history_records_each_run_with_caller_metadata_and_outcome(server):
    code = "import sys; print('hi'); sys.exit(3)"
    result = call(server, {"conversationId": "history", "language": "python", "code": code,
                           "metadata": {"ticket": "T-7", "attempt": 2}})
    assert (result["exitCode"], result["outcome"]) == (3, "error")
    timed_out = call(server, {"conversationId": "history", "language": "bash", "code": "sleep 5",
                              "timeoutSeconds": 0.5})
    assert timed_out["outcome"] == "timeout"
    record = httpx.get(f"{server.base_url}/v1/runs/{result['runId']}", headers=server.auth).json()
    times = {k: record.pop(k) for k in ("queuedAt", "startedAt", "finishedAt", "durationMs")}
    assert times["queuedAt"] <= times["startedAt"] <= times["finishedAt"], times
    assert 0 < times["durationMs"] < 10_000
    assert record == {
        "id": result["runId"], "conversationId": "history", "caller": "api-token", "language": "python",
        "codeBytes": len(code), "codeSha256": hashlib.sha256(code.encode()).hexdigest(), "code": None,
        "metadata": {"ticket": "T-7", "attempt": 2}, "state": "finished", "outcome": "error", "exitCode": 3,
        "error": None, "stdoutBytes": 3, "stderrBytes": 0, "truncated": False,
    }
    listing = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": "history"}, headers=server.auth)
    assert [(r["id"], r["outcome"]) for r in listing.json()["runs"]] == [
        (timed_out["runId"], "timeout"), (result["runId"], "error")]
    one = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": "history", "limit": 1}, headers=server.auth)
    assert [r["id"] for r in one.json()["runs"]] == [timed_out["runId"]]


def test_bad_history_requests_get_clear_errors(server):
    def get(path, **params):
        return httpx.get(f"{server.base_url}{path}", params=params, headers=server.auth)

    missing = get("/v1/runs/0123456789abcdef")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    for params, field in [({"conversationId": "../etc"}, "conversationId"), ({"limit": "0"}, "limit"),
                          ({"limit": "many"}, "limit"), ({"limit": "501"}, "limit")]:
        response = get("/v1/runs", **params)
        assert response.status_code == 400, params
        assert response.json()["error"] == "invalid_argument" and field in response.json()["message"]
    assert httpx.get(f"{server.base_url}/v1/runs").status_code == 401
    bad_metadata = httpx.post(server.mcp_url, headers={**server.auth, "Accept": "application/json"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox.run_code", "arguments": {
            "conversationId": "x", "language": "python", "code": "print(1)", "metadata": [1, 2]}}}).json()
    assert bad_metadata["error"]["code"] == -32602 and bad_metadata["error"]["data"]["field"] == "metadata"


@pytest.mark.anyio
async def test_runs_are_mcp_resources_and_code_is_kept_when_asked(server_storing_code):
    server = server_storing_code
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            templates = await session.list_resource_templates()
            assert sorted(t.uriTemplate for t in templates.resourceTemplates) == [
                "sandlot://conversations/{conversationId}/files/{path}",
                "sandlot://conversations/{conversationId}/runs", "sandlot://runs/{runId}",
                "sandlot://runs/{runId}/live", "sandlot://runs/{runId}/output"]
            result = await session.call_tool(
                "sandbox.run_code", {"conversationId": "resources", "language": "bash", "code": "echo kept"})
            run_id = result.structuredContent["runId"]
            listed = await session.list_resources()
            assert f"sandlot://runs/{run_id}" in [str(r.uri) for r in listed.resources]
            run = await session.read_resource(AnyUrl(f"sandlot://runs/{run_id}"))
            record = json.loads(run.contents[0].text)
            assert run.contents[0].mimeType == "application/json"
            assert (record["id"], record["code"], record["outcome"]) == (run_id, "echo kept", "ok")
            conversation = await session.read_resource(AnyUrl("sandlot://conversations/resources/runs"))
            assert [r["id"] for r in json.loads(conversation.contents[0].text)["runs"]] == [run_id]
            with pytest.raises(Exception, match="no run"):
                await session.read_resource(AnyUrl("sandlot://runs/nope"))


@pytest.fixture
def anyio_backend():
    return "asyncio"
