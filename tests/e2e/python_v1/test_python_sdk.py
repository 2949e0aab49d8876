"""The official Python MCP SDK (`mcp` 1.x) against `sandlot serve` (Streamable HTTP, legacy HTTP+SSE at /sse and
/mcp/sse) and `sandlot stdio`:
initialize, list the tools, run Python that writes a file, download the file by its signed URL, compare bytes."""

import json

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

from conftest import sandlot_binary

EXPECTED_TOOLS = ["sandbox_browser", "sandbox_list_runners", "sandbox_run_code", "sandbox_session", "sandbox_upload_file"]
WRITE_FILE = (
    "import os\n"
    "data = bytes(range(256)) * 4\n"
    "os.makedirs('out', exist_ok=True)\n"
    "open('out/result file.bin', 'wb').write(data)\n"
    "print('wrote', len(data))\n"
)
EXPECTED_BYTES = bytes(range(256)) * 4


async def exercise(session, download):
    init = await session.initialize()
    assert init.serverInfo.name == "sandlot"
    assert "sandbox_run_code" in init.instructions
    tools = await session.list_tools()
    assert sorted(t.name for t in tools.tools) == EXPECTED_TOOLS
    run_code = next(t for t in tools.tools if t.name == "sandbox_run_code")
    assert run_code.annotations.readOnlyHint is False and run_code.annotations.openWorldHint is False

    result = await session.call_tool("sandbox_run_code", {"conversationId": "e2e", "language": "python", "code": WRITE_FILE})
    assert result.isError is False, result
    data = result.structuredContent
    # The text a model reads: a header, then the output once.
    assert result.content[0].text == f"outcome: ok, exit code 0, {data['durationMs']} ms\n{data['output']}"
    assert (data["success"], data["exitCode"], data["stdout"], data["output"]) == (True, 0, "wrote 1024\n", "wrote 1024\n")
    assert [(f["name"], f["size"]) for f in data["files"]] == [("out/result file.bin", 1024)]
    assert await download(data["files"][0]["url"]) == EXPECTED_BYTES

    # The dotted alias (not listed, still callable), a failing program, and the runner list.
    failed = await session.call_tool("sandbox.run_code", {"conversationId": "e2e", "language": "bash", "code": "echo oops >&2; exit 3"})
    assert failed.isError is True
    assert (failed.structuredContent["success"], failed.structuredContent["exitCode"], failed.structuredContent["output"]) == (False, 3, "oops\n")
    runners = await session.call_tool("sandbox.list_runners", {})
    assert sorted(r["language"] for r in runners.structuredContent["languages"]) == ["bash", "javascript", "python", "typescript"]


@pytest.mark.anyio
async def test_streamable_http(server):
    async def download(url):
        async with httpx.AsyncClient() as client:
            response = await client.get(url)
            assert response.status_code == 200
            return response.content

    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await exercise(session, download)


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/sse", "/mcp/sse"])
async def test_legacy_sse(server, path):
    async def download(url):
        async with httpx.AsyncClient() as client:
            response = await client.get(url)
            assert response.status_code == 200
            return response.content

    async with sse_client(server.base_url + path, headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, download)


@pytest.mark.anyio
async def test_stdio(server):
    # The stdio server shares the HTTP server's root and secret, so its URLs can be downloaded there.
    params = StdioServerParameters(
        command=sandlot_binary(),
        args=["stdio"],
        env=server.stdio_env,
    )

    async def download(url):
        assert url.startswith(server.base_url + "/files/e2e/")
        async with httpx.AsyncClient() as client:
            response = await client.get(url)
            assert response.status_code == 200
            return response.content

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, download)
            # Over stdio there is no HTTP body limit: code over 1 MiB is refused by the tool itself, as a result
            # naming the field (this client speaks 2025-11-25: SEP-1303).
            refused = await session.call_tool("sandbox_run_code", {"conversationId": "e2e", "language": "python", "code": "#" * (1024 * 1024 + 1)})
            assert refused.isError is True and "invalid code" in refused.content[0].text, refused


@pytest.fixture
def anyio_backend():
    return "asyncio"
