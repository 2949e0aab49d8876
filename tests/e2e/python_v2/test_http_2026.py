"""Protocol 2026-07-28 over Streamable HTTP (`/mcp`), beside every older revision on the same endpoint.

- The official Python SDK 2.x `mcp.Client` in its default mode probes `server/discover`, which sandlot answers, and
  then speaks 2026-07-28 statelessly: it runs code, reads the run as a resource, gets progress, hears of runs on a
  `subscriptions/listen` stream, and cancels a call by closing its response stream (the run is killed).
- fastmcp 4.x's `Client` does the same with its defaults.
- The revision's header rules, with raw HTTP: `Mcp-Method` and `Mcp-Name` must match the body (-32020 HeaderMismatch,
  HTTP 400, when missing or different); `conversationId` is marked `x-mcp-header`, so its `Mcp-Param-Conversation-Id`
  must be sent and match; an unknown method is HTTP 404 -32601.
- Tasks (the Python SDK has no client for them yet, so raw HTTP): a client that declares the extension gets a task
  for `sandbox_run_code`, polls it to its result after the request that made it is gone, and cancels one (its run
  is killed); another tenant's task is unknown to a tenant; without the extension the result comes on the request.
"""

import json
import threading
import time

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated

from conftest import start_server, wait_until

VERSION = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def modern_client(server, **options):
    http = httpx2.AsyncClient(headers=server.auth, timeout=60)
    return Client(streamable_http_client(server.mcp_url, http_client=http), **options)


def runs_of(server, conversation):
    response = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": conversation}, headers=server.auth)
    assert response.status_code == 200, response.text
    return response.json()["runs"]


@pytest.mark.anyio
async def test_the_default_client_discovers_and_speaks_2026_07_28(server):
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    async with modern_client(server) as client:
        assert client.protocol_version == VERSION
        assert client.server_info.name == "sandlot"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        mirrored = tools["sandbox_run_code"].input_schema["properties"]["conversationId"]
        assert mirrored["x-mcp-header"] == "Conversation-Id", mirrored
        code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)"
        result = await client.call_tool("sandbox_run_code", {"conversationId": "h2026", "language": "python",
                                                             "code": code}, progress_callback=on_progress)
        assert result.is_error is False, result
        assert result.structured_content["stdout"] == "tick 0\ntick 1\ntick 2\n"
        assert "".join(progress) == "tick 0\ntick 1\ntick 2\n", progress
        run = await client.read_resource(f"sandlot://runs/{result.structured_content['runId']}")
        assert json.loads(run.contents[0].text)["outcome"] == "ok"


@pytest.mark.anyio
async def test_closing_the_response_stream_cancels_the_run(server):
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)"

    async def call():
        async with modern_client(server) as client:
            await client.call_tool("sandbox_run_code", {"conversationId": "h2026-cancel", "language": "python",
                                                        "code": code})

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(30):
            while not runs_of(server, "h2026-cancel"):
                await anyio.sleep(0.1)
        # The client goes away mid-call: its connection, and so the call's response stream, closes.
        group.cancel_scope.cancel()
    wait_until(lambda: [r for r in runs_of(server, "h2026-cancel") if r.get("finishedAt")], 30)
    [run] = runs_of(server, "h2026-cancel")
    assert run["outcome"] == "cancelled" and run["durationMs"] < 30_000, run


OTHER_TOKEN = "other-tenant-token-" + "5" * 16


@pytest.fixture
def two_tenants(root):
    """The default token's tenant, and `other`."""
    yield from start_server(root, {"MCP_API_TOKENS": f"other:{OTHER_TOKEN}"})


@pytest.mark.anyio
async def test_a_subscription_hears_of_the_tenants_runs_only(two_tenants):
    server = two_tenants
    async with modern_client(server) as client:
        async with client.listen(resource_subscriptions=["sandlot://runs", "file:///etc/passwd"],
                                 resources_list_changed=True) as subscription:
            assert subscription.honored.resource_subscriptions == ["sandlot://runs"]
            assert subscription.honored.resources_list_changed is True
            # Another tenant's run first: nothing of it may arrive.
            other = httpx.post(server.mcp_url, timeout=60, headers={
                "Authorization": f"Bearer {OTHER_TOKEN}", "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code",
                      "arguments": {"conversationId": "h2026-other", "language": "bash", "code": "echo theirs"}}})
            assert "theirs" in other.text, other.text
            result = await client.call_tool("sandbox_run_code", {"conversationId": "h2026-listen",
                                                                 "language": "bash", "code": "echo ours"})
            assert result.is_error is False
            events = []
            with anyio.fail_after(30):
                async for event in subscription:
                    events.append(event.uri if isinstance(event, ResourceUpdated) else type(event).__name__)
                    if "sandlot://runs" in events and "ResourcesListChanged" in events:
                        break
    assert set(events) == {"ResourcesListChanged", "sandlot://runs"}, events


def test_each_update_carries_its_run_event_and_no_other_tenants(two_tenants):
    """A raw stream, to read what the SDK folds away: each update's `_meta` (the run event) and subscription id."""
    server = two_tenants
    body = {"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen",
            "params": {"notifications": {"resourceSubscriptions": ["sandlot://runs"]}, "_meta": META}}
    headers = {**server.auth, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": VERSION,
               "Mcp-Method": "subscriptions/listen"}
    received, acknowledged = [], threading.Event()

    def listen():
        with httpx.stream("POST", server.mcp_url, json=body, headers=headers, timeout=60) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                message = json.loads(line[6:])
                if message.get("method") == "notifications/subscriptions/acknowledged":
                    acknowledged.set()
                    continue
                received.append(message)
                event = message["params"]["_meta"]["sandlot/runEvent"]
                if event["method"].endswith("run_finished") and event["params"]["conversationId"] == "h2026-raw2":
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert acknowledged.wait(30)
    other = {**server.auth, "Authorization": f"Bearer {OTHER_TOKEN}"}
    for token_headers, conversation in [(other, "h2026-theirs"), (server.auth, "h2026-raw2")]:
        response = httpx.post(server.mcp_url, timeout=60, headers={
            **token_headers, "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code",
                  "arguments": {"conversationId": conversation, "language": "bash", "code": "echo hi"}}})
        assert response.status_code == 200, response.text
    listener.join(30)
    assert not listener.is_alive(), received
    methods = [m["params"]["_meta"]["sandlot/runEvent"]["method"] for m in received]
    assert methods[0] == "notifications/sandlot/run_started" and methods[-1] == "notifications/sandlot/run_finished"
    for message in received:
        assert message["method"] == "notifications/resources/updated" and message["params"]["uri"] == "sandlot://runs"
        assert message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 77, message
        assert message["params"]["_meta"]["sandlot/runEvent"]["params"]["conversationId"] == "h2026-raw2", message


def modern_post(server, body, headers=None, token=None):
    sent = {"Authorization": f"Bearer {token or server.token}", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION, "Mcp-Method": body["method"], **(headers or {})}
    body = {"jsonrpc": "2.0", "id": 1, **body, "params": {**body.get("params", {}), "_meta": META}}
    response = httpx.post(server.mcp_url, json=body, headers={k: v for k, v in sent.items() if v is not None},
                          timeout=60)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    return response.status_code, json.loads(text) if text else None


def test_routing_headers_are_checked_against_the_body(server):
    call = {"method": "tools/call", "params": {"name": "sandbox_run_code", "arguments": {
        "conversationId": "h2026-raw", "language": "bash", "code": "echo routed"}}}
    mirrored = {"Mcp-Name": "sandbox_run_code", "Mcp-Param-Conversation-Id": "h2026-raw"}
    status, body = modern_post(server, call, mirrored)
    assert status == 200 and body["result"]["structuredContent"]["stdout"] == "routed\n", body
    assert body["result"].get("resultType", "complete") == "complete", body
    for headers in [{**mirrored, "Mcp-Method": "tools/list"},          # a method that is not the body's
                    {**mirrored, "Mcp-Name": None},                    # Mcp-Name missing
                    {**mirrored, "Mcp-Name": "sandbox_session"},       # another tool named
                    {**mirrored, "Mcp-Param-Conversation-Id": None},   # the mirrored parameter missing
                    {**mirrored, "Mcp-Param-Conversation-Id": "elsewhere"},  # routed to another conversation
                    {**mirrored, "MCP-Protocol-Version": "2025-11-25"}]:     # header and _meta disagree
        status, body = modern_post(server, call, headers)
        assert (status, body["error"]["code"]) == (400, -32020), (headers, status, body)
    # A mirrored value in the Base64 form is decoded before it is compared.
    encoded = {**mirrored, "Mcp-Param-Conversation-Id": "=?base64?aDIwMjYtcmF3?="}
    status, body = modern_post(server, call, encoded)
    assert status == 200 and "result" in body, body
    status, body = modern_post(server, {"method": "no/such/method"})
    assert (status, body["error"]["code"]) == (404, -32601), body
    status, body = modern_post(server, {"method": "server/discover"})
    assert status == 200 and VERSION in body["result"]["supportedVersions"], body


@pytest.mark.anyio
async def test_fastmcp_4_runs_code_at_its_default_protocol(server):
    from fastmcp import Client as FastMCPClient
    async with FastMCPClient(server.mcp_url, auth=server.token) as client:
        # A host lists the tools first: the listing is what tells a client which arguments to mirror in headers.
        assert "sandbox_run_code" in [tool.name for tool in await client.list_tools()]
        result = await client.call_tool("sandbox_run_code", {"conversationId": "fastmcp", "language": "python",
                                                             "code": "print(6 * 7)"})
        assert client.protocol_version == VERSION
        assert result.structured_content["stdout"] == "42\n", result
        runs = await client.list_resources()
        assert any(str(r.uri) == f"sandlot://runs/{result.structured_content['runId']}" for r in runs)


@pytest.fixture
def anyio_backend():
    return "asyncio"


TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def task_post(server, method, params, token=None, capabilities=TASKS, name=None):
    """A raw 2026-07-28 request of a client that declares the Tasks extension (or `capabilities`)."""
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": capabilities}
    headers = {"Authorization": f"Bearer {token or server.token}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": VERSION, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    if "arguments" in params:
        headers["Mcp-Param-Conversation-Id"] = params["arguments"]["conversationId"]
    body = {"jsonrpc": "2.0", "id": 5, "method": method, "params": {**params, "_meta": meta}}
    response = httpx.post(server.mcp_url, json=body, headers=headers, timeout=60)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    return response.status_code, json.loads(text)


def run_as_task(server, conversation, code, token=None):
    status, body = task_post(server, "tools/call", {"name": "sandbox_run_code", "arguments": {
        "conversationId": conversation, "language": "bash", "code": code}}, token=token, name="sandbox_run_code")
    assert status == 200 and body["result"]["resultType"] == "task", body
    return body["result"]


def poll(server, task_id, token=None, until=("completed", "failed", "cancelled")):
    deadline = time.monotonic() + 60
    while True:
        status, body = task_post(server, "tasks/get", {"taskId": task_id}, token=token, name=task_id)
        assert status == 200, body
        if body["result"]["status"] in until:
            return body["result"]
        assert time.monotonic() < deadline, body
        time.sleep(body["result"].get("pollIntervalMs", 500) / 1000)


def test_a_task_runs_code_after_its_request_is_gone_and_gives_its_result(two_tenants):
    server = two_tenants
    task = run_as_task(server, "h2026-task", "sleep 1; echo done > /data/task.txt; echo finished")
    assert task["status"] == "working" and task["ttlMs"] > 0 and task["pollIntervalMs"] > 0, task
    # The request that made it has been answered (its connection is gone); the run goes on.
    done = poll(server, task["taskId"])
    assert done["status"] == "completed" and done["resultType"] == "complete", done
    assert done["result"]["structuredContent"]["stdout"] == "finished\n", done
    assert next((server.root / "h2026-task").rglob("task.txt")).read_text() == "done\n"
    # Another tenant cannot see it, nor cancel it: the same answer as an unknown id.
    for method in ["tasks/get", "tasks/cancel"]:
        status, body = task_post(server, method, {"taskId": task["taskId"]}, token=OTHER_TOKEN, name=task["taskId"])
        assert body["error"]["code"] == -32602 and "task not found" in body["error"]["message"], (method, body)
    status, body = task_post(server, "tasks/get", {"taskId": "no-such-task"}, name="no-such-task")
    assert body["error"]["code"] == -32602, body


def test_a_cancelled_task_kills_its_run(server):
    task = run_as_task(server, "h2026-task-cancel", "echo started; sleep 120")
    wait_until(lambda: runs_of(server, "h2026-task-cancel"), 30)
    status, body = task_post(server, "tasks/cancel", {"taskId": task["taskId"]}, name=task["taskId"])
    assert status == 200 and "error" not in body, body
    assert poll(server, task["taskId"])["status"] == "cancelled"
    wait_until(lambda: [r for r in runs_of(server, "h2026-task-cancel") if r.get("finishedAt")], 30)
    [run] = runs_of(server, "h2026-task-cancel")
    assert run["outcome"] == "cancelled" and run["durationMs"] < 60_000, run


def test_without_the_extension_a_call_is_answered_on_its_request(server):
    status, body = task_post(server, "tools/call", {"name": "sandbox_run_code", "arguments": {
        "conversationId": "h2026-notask", "language": "bash", "code": "echo direct"}},
        capabilities={}, name="sandbox_run_code")
    assert body["result"]["resultType"] == "complete", body
    assert body["result"]["structuredContent"]["stdout"] == "direct\n", body
    # Listing runners answers at once: never a task, even for a client that takes them.
    status, body = task_post(server, "tools/call", {"name": "sandbox_list_runners"}, name="sandbox_list_runners")
    assert body["result"]["resultType"] == "complete", body
    status, body = task_post(server, "tasks/get", {"taskId": "x"}, capabilities={}, name="x")
    assert body["error"]["code"] == -32021, body
