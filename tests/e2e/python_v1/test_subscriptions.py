"""Run events as resource updates for a session of the earlier revisions (the official Python SDK 1.x):
`resources/subscribe` on `sandlot://runs` brings `notifications/resources/updated` on the session's stream for each
event of the caller's runs, with the event in `_meta["sandlot/runEvent"]`, until `resources/unsubscribe`; a URI
that is not a run's is refused. (2026-07-28's `subscriptions/listen`: tests/e2e/python_v2/test_http_2026.py.)"""

import time

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


@pytest.mark.anyio
async def test_a_session_hears_of_its_runs_until_it_unsubscribes(server):
    updates = []

    async def on_message(message):
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ResourceUpdatedNotification):
            updates.append(message.root.params)

    async def run(session, code):
        result = await session.call_tool("sandbox_run_code", {"conversationId": "subscribed", "language": "bash",
                                                              "code": code})
        assert result.isError is False, result

    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write, message_handler=on_message) as session:
            initialized = await session.initialize()
            assert initialized.capabilities.resources.subscribe is True
            with pytest.raises(McpError) as refused:
                await session.subscribe_resource("file:///etc/passwd")
            assert "sandlot://runs" in refused.value.error.message
            await session.subscribe_resource("sandlot://runs")
            await run(session, "echo first")
            deadline = time.monotonic() + 30
            while not any(u.meta.model_dump()["sandlot/runEvent"]["method"].endswith("run_finished") for u in updates):
                assert time.monotonic() < deadline, updates
                await anyio.sleep(0.05)
            assert {str(u.uri) for u in updates} == {"sandlot://runs"}
            assert updates[0].meta.model_dump()["sandlot/runEvent"]["params"]["conversationId"] == "subscribed"

            await session.unsubscribe_resource("sandlot://runs")
            heard = len(updates)
            await run(session, "echo second")
            await anyio.sleep(1)
            assert len(updates) == heard, updates[heard:]


@pytest.fixture
def anyio_backend():
    return "asyncio"
