"""Cancellation: `notifications/cancelled` for an in-flight tools/call kills the run's whole process tree within a
second, and the run is announced as cancelled on /mcp/events."""

import json
import threading
import time

import anyio
import httpx
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from test_shutdown import sandbox_processes


@pytest.mark.anyio
async def test_a_cancelled_call_kills_its_run(server):
    events, connected = [], threading.Event()

    def listen():
        with httpx.stream("GET", f"{server.base_url}/mcp/events?conversationId=cancel", headers=server.auth, timeout=30) as response:
            connected.set()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1]["method"] == "notifications/sandlot/run_finished":
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert connected.wait(10)
    code = "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(60)"
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()  # request id 0
            async with anyio.create_task_group() as group:
                group.start_soon(session.call_tool, "sandbox.run_code",  # request id 1
                                 {"conversationId": "cancel", "language": "python", "code": code, "timeoutSeconds": 120})
                deadline = time.monotonic() + 15
                while len(sandbox_processes()) < 2 and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                assert len(sandbox_processes()) >= 2, "the run and its child did not start"
                cancelled_at = time.monotonic()
                await session.send_notification(types.ClientNotification(types.CancelledNotification(
                    params=types.CancelledNotificationParams(requestId=1, reason="test"))))
                while sandbox_processes() and time.monotonic() - cancelled_at < 5:
                    await anyio.sleep(0.02)
                gone_after = time.monotonic() - cancelled_at
                group.cancel_scope.cancel()
    assert sandbox_processes() == []
    assert gone_after < 1.0, f"the run's processes were gone only after {gone_after:.2f} s"
    listener.join(10)
    assert [e["method"] for e in events] == ["notifications/sandlot/run_started", "notifications/sandlot/run_finished"]
    assert events[1]["params"]["termination"] == {"kind": "cancelled"}


@pytest.fixture
def anyio_backend():
    return "asyncio"
