"""Cancellation: `notifications/cancelled` for an in-flight tools/call kills the run's whole process tree at once
(well within a second on an idle machine; the tests allow CANCEL_BOUND for a loaded one), and the run is announced
as cancelled on /mcp/events and recorded as cancelled in the history. The same when the client goes away: a
stateless HTTP request dropped, a legacy SSE stream closed, stdin of `sandlot stdio` closed."""

import json
import socket
import subprocess
import time

import anyio
import httpx
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import RunEvents, describe_processes, sandbox_processes, sandlot_binary, wait_until

# A run that leaves a child behind and sleeps: the whole tree must go.
SLEEPER = "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(60)"
# How soon after the cancellation no process of the run may be left. Cancelling takes milliseconds; a loaded 2-core
# machine can stretch that to a second or two, never to the run's own 60 s, so the test still fails when
# cancellation does not kill the run.
CANCEL_BOUND = 10


@pytest.mark.anyio
async def test_a_cancelled_call_kills_its_run(server):
    listener = RunEvents(server, "cancel").start()
    code = SLEEPER
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()  # request id 0
            async with anyio.create_task_group() as group:
                group.start_soon(session.call_tool, "sandbox.run_code",  # request id 1
                                 {"conversationId": "cancel", "language": "python", "code": code, "timeoutSeconds": 120})
                deadline = time.monotonic() + 30
                while len(sandbox_processes()) < 2 and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                assert len(sandbox_processes()) >= 2, "the run and its child did not start"
                cancelled_at = time.monotonic()
                await session.send_notification(types.ClientNotification(types.CancelledNotification(
                    params=types.CancelledNotificationParams(requestId=1, reason="test"))))
                while sandbox_processes() and time.monotonic() - cancelled_at < 2 * CANCEL_BOUND:
                    await anyio.sleep(0.02)
                gone_after = time.monotonic() - cancelled_at
                group.cancel_scope.cancel()
    assert sandbox_processes() == [], f"processes of the run left {gone_after:.1f} s after the cancellation"
    assert gone_after < CANCEL_BOUND, f"the run's processes were gone only after {gone_after:.2f} s"
    events = listener.wait()
    assert [e["method"] for e in events] == ["notifications/sandlot/run_started", "notifications/sandlot/run_finished"]
    assert events[1]["params"]["termination"] == {"kind": "cancelled"}
    assert history_outcomes(server, "cancel") == ["cancelled"]


def history_outcomes(server, conversation):
    """The outcomes of a conversation's runs, newest first, once none is in flight any more."""
    deadline = time.monotonic() + 20
    while True:
        runs = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": conversation},
                         headers=server.auth).json()["runs"]
        if all(r["state"] == "finished" for r in runs) or time.monotonic() > deadline:
            return [r["outcome"] for r in runs]
        time.sleep(0.05)


def wait_for_sandbox(count=2):
    wait_until(lambda: len(sandbox_processes()) >= count, 30)
    assert len(sandbox_processes()) >= count, "the run and its child did not start"


def assert_cancelled_at_once(server, conversation, since):
    """No process of the run is left CANCEL_BOUND after `since`, and the history says the run was cancelled."""
    wait_until(lambda: not sandbox_processes(), 2 * CANCEL_BOUND - (time.monotonic() - since), interval=0.02)
    gone_after = time.monotonic() - since
    left = sandbox_processes()
    assert left == [], describe_processes(left)
    assert gone_after < CANCEL_BOUND, f"the run's processes were gone only after {gone_after:.2f} s"
    assert history_outcomes(server, conversation) == ["cancelled"]


def run_code_request(conversation):
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "sandbox.run_code", "arguments": {
        "conversationId": conversation, "language": "python", "code": SLEEPER, "timeoutSeconds": 120}}}


def test_a_dropped_http_request_cancels_its_run(server):
    # A raw connection: the request is sent, then the client goes away before any byte of the answer.
    body = json.dumps(run_code_request("dropped-http")).encode()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)
        wait_for_sandbox()
        dropped_at = time.monotonic()
    assert_cancelled_at_once(server, "dropped-http", dropped_at)


def test_a_closed_legacy_sse_stream_cancels_its_run(server):
    with httpx.Client(timeout=30) as client:
        with client.stream("GET", f"{server.base_url}/sse", headers=server.auth) as stream:
            lines = stream.iter_lines()
            endpoint = next(line[6:] for line in lines if line.startswith("data: "))
            post = lambda body: client.post(f"{server.base_url}{endpoint}", json=body, headers=server.auth)
            post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            next(line for line in lines if line.startswith("data: "))  # the initialize result
            post({"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert post(run_code_request("dropped-sse")).status_code == 202
            wait_for_sandbox()
            closed_at = time.monotonic()
    assert_cancelled_at_once(server, "dropped-sse", closed_at)


def test_closing_stdin_of_sandlot_stdio_cancels_its_run(server):
    # Nothing built ahead in this second server (no warm init, no prepared sandbox): all its processes are its run's.
    env = dict(server.stdio_env, SANDLOT_WARM_INITS="0", SANDLOT_PREPARED_SANDBOXES="0",
               SANDLOT_PREPARED_LIVE_SANDBOXES="0")
    process = subprocess.Popen([sandlot_binary(), "stdio"], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    def send(message):
        process.stdin.write((json.dumps(message) + "\n").encode())
        process.stdin.flush()
    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert json.loads(process.stdout.readline())["id"] == 0
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send(run_code_request("dropped-stdio"))
    wait_for_sandbox()
    closed_at = time.monotonic()
    process.stdin.close()
    # The stdio server shares the root, hence the history, with `server`.
    assert_cancelled_at_once(server, "dropped-stdio", closed_at)
    assert process.wait(10) == 0
    runs = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": "dropped-stdio"}, headers=server.auth)
    assert runs.json()["runs"][0]["caller"] == "stdio"


@pytest.fixture
def anyio_backend():
    return "asyncio"
