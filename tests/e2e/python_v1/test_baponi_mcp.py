"""The Baponi profile against the real `sandlot serve` and jail, with the official MCP Python SDK (`mcp` 1.x) at
`/p/baponi/mcp`: initialize, tools/list, sandbox_execute in a thread (files under /home/baponi persist, the working
directory /data is scratch), files_download of text and a PNG; and sandlot's own tools served beside Baponi's, a
conversation's files seen through both (a thread is a conversation)."""

import base64
import json

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import start_server

WRITE = (
    "import json, os, zlib, struct\n"
    "os.makedirs('/home/baponi/output', exist_ok=True)\n"
    "json.dump({'results': [1, 2, 3]}, open('/home/baponi/data.json', 'w'))\n"
    "def chunk(kind, data):\n"
    "    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))\n"
    "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 0, 0, 0, 0))\n"
    "png += chunk(b'IDAT', zlib.compress(b'\\x00\\x00')) + chunk(b'IEND', b'')\n"
    "open('/home/baponi/output/chart.png', 'wb').write(png)\n"
    "open('scratch.txt', 'w').write('gone after the run')\n"
    "print(os.getcwd())\n"
)
READ = (
    "import os\n"
    "print(open('/home/baponi/data.json').read())\n"
    "print(sorted(os.listdir('.')))\n"
)


def baponi_url(server):
    return f"{server.base_url}/p/baponi/mcp"


@pytest.mark.anyio
async def test_the_official_sdk_drives_baponi_s_tools(server):
    async with streamablehttp_client(baponi_url(server), headers=server.auth) as (read, write, get_session_id):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.serverInfo.name == "baponi"
            assert "sandbox_execute" in init.instructions and "files_download" in init.instructions
            assert get_session_id() is None, "Baponi's MCP is stateless"
            tools = await session.list_tools()
            assert [t.name for t in tools.tools] == ["sandbox_execute", "files_download"]

            wrote = await session.call_tool("sandbox_execute", {"code": WRITE, "thread_id": "e2e-thread"})
            assert wrote.isError is False, wrote
            assert wrote.content[0].text == "## Execution Result\n\n**stdout:**\n```\n/data\n```\n\n**Exit code:** 0"
            again = await session.call_tool("sandbox_execute", {"code": READ, "thread_id": "e2e-thread"})
            assert again.content[0].text == (
                "## Execution Result\n\n**stdout:**\n```\n{\"results\": [1, 2, 3]}\n[]\n```\n\n**Exit code:** 0"
            )
            failed = await session.call_tool("sandbox_execute", {"code": "echo oops >&2; exit 3", "language": "bash"})
            assert failed.isError is True
            assert failed.content[0].text == "## Execution Result\n\n**stderr:**\n```\noops\n```\n\n**Exit code:** 3"

            text = await session.call_tool("files_download", {"source": "thread", "id": "e2e-thread", "path": "data.json"})
            assert (text.isError, text.content[0].type, text.content[0].text) == (False, "text", '{"results": [1, 2, 3]}')
            image = await session.call_tool(
                "files_download", {"source": "thread", "id": "e2e-thread", "path": "output/chart.png"})
            assert (image.content[0].type, image.content[0].mimeType) == ("image", "image/png")
            assert base64.b64decode(image.content[0].data).startswith(b"\x89PNG\r\n\x1a\n")


def rpc(url, server, name, arguments):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    response = httpx.post(url, json=body, timeout=60, headers={**server.auth, "Accept": "application/json"})
    assert response.status_code == 200, response.text
    return json.loads(response.text)["result"]


def test_sandlot_s_and_baponi_s_tools_share_a_conversation(server):
    own = rpc(server.mcp_url, server, "sandbox_run_code",
              {"conversationId": "both", "language": "bash", "code": "echo from-sandlot > notes.txt"})
    assert own["structuredContent"]["success"] is True
    seen = rpc(baponi_url(server), server, "sandbox_execute",
               {"code": "cat /home/baponi/notes.txt; echo from-baponi > /home/baponi/back.txt", "language": "bash",
                "thread_id": "both"})
    assert seen["content"][0]["text"] == "## Execution Result\n\n**stdout:**\n```\nfrom-sandlot\n```\n\n**Exit code:** 0"
    back = rpc(server.mcp_url, server, "sandbox_run_code",
               {"conversationId": "both", "language": "bash", "code": "cat back.txt"})
    assert back["structuredContent"]["stdout"] == "from-baponi\n"


@pytest.fixture
def root_baponi_server(root):
    """`sandlot serve` with SANDLOT_ROOT_PROFILE=baponi."""
    yield from start_server(root, {"SANDLOT_ROOT_PROFILE": "baponi"})


def tool_names(url, server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(url, json=body, timeout=30,
                          headers={**server.auth, "Accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.text
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    return [tool["name"] for tool in json.loads(text)["result"]["tools"]]


def test_baponi_at_the_root_moves_sandlot_s_own_surface_to_p_sandlot(root_baponi_server):
    server = root_baponi_server
    assert tool_names(f"{server.base_url}/mcp", server) == ["sandbox_execute", "files_download"]
    assert tool_names(f"{server.base_url}/p/baponi/mcp", server) == ["sandbox_execute", "files_download"]
    assert tool_names(f"{server.base_url}/p/sandlot/mcp", server) == [
        "sandbox_run_code", "sandbox_list_runners", "sandbox_upload_file", "sandbox_session", "sandbox_browser"]
    assert httpx.get(f"{server.base_url}/p/sandlot/v1/runs", headers=server.auth).status_code == 200
    assert httpx.get(f"{server.base_url}/v1/runs", headers=server.auth).status_code == 404
    wrong = httpx.post(f"{server.base_url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Authorization": "Bearer wrong"})
    assert (wrong.status_code, wrong.json()) == (
        401, {"error": "unauthorized", "message": "Invalid or revoked API key."})
