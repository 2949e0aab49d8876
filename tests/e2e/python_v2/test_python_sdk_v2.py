"""The official Python MCP SDK 2.x (`mcp` 2.3, the high-level `mcp.Client`) against `sandlot serve` over
Streamable HTTP and the legacy HTTP+SSE transport, and against `sandlot stdio`. Its default mode first probes
`server/discover` (2026-07-28): over Streamable HTTP and stdio sandlot answers it and the client speaks 2026-07-28
(test_http_2026.py, test_protocol_2026.py); over legacy SSE it starts with initialize."""

import time

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from conftest import sandlot_binary

# A client whose discover probe goes unanswered waits 10 s for it; an answered one connects in milliseconds (seconds on a
# loaded machine).
PROBE_BOUND = 8

CODE = "open('/data/v2.txt', 'w').write('made by mcp 2.x\\n')\nprint('ok')"


async def exercise(client, download):
    assert client.server_info.name == "sandlot"
    tools = await client.list_tools()
    assert sorted(t.name for t in tools.tools) == ["sandbox_browser", "sandbox_list_runners", "sandbox_run_code", "sandbox_session", "sandbox_upload_file"]
    started = time.monotonic()
    result = await client.call_tool("sandbox_run_code", {"conversationId": "v2", "language": "python", "code": CODE})
    assert result.is_error is False, result
    data = result.structured_content
    assert (data["success"], data["stdout"]) == (True, "ok\n")
    url = next(f["url"] for f in data["files"] if f["name"] == "v2.txt")
    assert await download(url) == b"made by mcp 2.x\n"
    # The discover probe must be answered at once, not after the client's 10 s timeout (PROBE_BOUND: at once on a
    # loaded machine, yet below that timeout).
    assert time.monotonic() - started < PROBE_BOUND


async def download(url):
    async with httpx2.AsyncClient() as http:
        response = await http.get(url)
        assert response.status_code == 200
        return response.content


@pytest.mark.anyio
async def test_streamable_http(server):
    started = time.monotonic()
    http = httpx2.AsyncClient(headers=server.auth, timeout=60)
    async with Client(streamable_http_client(server.mcp_url, http_client=http)) as client:
        assert time.monotonic() - started < PROBE_BOUND, "connecting took the discover probe's timeout"
        await exercise(client, download)


@pytest.mark.anyio
async def test_legacy_sse(server):
    async with Client(sse_client(server.base_url + "/sse", headers=server.auth)) as client:
        await exercise(client, download)


@pytest.mark.anyio
async def test_stdio(server):
    params = StdioServerParameters(
        command=sandlot_binary(),
        args=["stdio"],
        env=server.stdio_env,
    )
    started = time.monotonic()
    async with Client(params) as client:
        assert time.monotonic() - started < PROBE_BOUND, "connecting took the discover probe's timeout"
        await exercise(client, download)


@pytest.fixture
def anyio_backend():
    return "asyncio"
