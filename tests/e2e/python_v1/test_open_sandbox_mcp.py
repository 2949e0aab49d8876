"""The open-sandbox profile against the real `sandlot serve` and jail, driven by the official MCP Python SDK (`mcp`
1.x) at `/p/open-sandbox/mcp`, as Codex's MCP client drives the product: initialize, tools/list (the product's
dotted names), file.write → file.read → file.search → file.replace → file.read, `shell.exec echo test` (argv, not a
shell string), `code.exec` with Python writing into the workspace, and a path outside the workspace refused with the
unified error."""

import json

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


def url(server):
    return f"{server.base_url}/p/open-sandbox/mcp"


def result_of(call):
    """The tool's result object: the structured content, which the text block holds as JSON too."""
    assert call.isError is not True, call
    assert json.loads(call.content[0].text) == call.structuredContent
    return call.structuredContent


@pytest.mark.anyio
async def test_the_official_sdk_drives_open_sandbox_s_tools(server):
    async with streamablehttp_client(url(server), headers=server.auth) as (read, write, _session_id):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.serverInfo.name == "open-sandbox"
            names = [tool.name for tool in (await session.list_tools()).tools]
            assert names == sorted(names)
            for name in ["file.read", "file.write", "file.list", "file.search", "file.replace", "shell.exec", "code.exec"]:
                assert name in names

            wrote = result_of(await session.call_tool("file.write", {"path": "notes/a.txt", "content": "alpha\nbeta\n"}))
            assert wrote == {"path": "/workspace/notes/a.txt"}
            assert result_of(await session.call_tool("file.read", {"path": "/workspace/notes/a.txt"})) == {
                "content": "alpha\nbeta\n"
            }
            found = result_of(await session.call_tool("file.search", {"path": "notes/a.txt", "query": "bet"}))
            assert found == {"matches": ["beta"]}
            replaced = result_of(
                await session.call_tool("file.replace", {"path": "notes/a.txt", "search": "a", "replace": "A"})
            )
            assert replaced == {"count": 3}
            assert result_of(await session.call_tool("file.read", {"path": "notes/a.txt"})) == {"content": "AlphA\nbetA\n"}

            echoed = result_of(await session.call_tool("shell.exec", {"command": "echo", "args": ["test"]}))
            assert echoed == {"stdout": "test\n", "stderr": "", "exit_code": 0}
            ran = result_of(
                await session.call_tool(
                    "code.exec",
                    {"runtime": "python", "args": ["-c", "open('made.txt', 'w').write('by python')"]},
                )
            )
            assert ran["exit_code"] == 0, ran
            assert result_of(await session.call_tool("file.read", {"path": "made.txt"})) == {"content": "by python"}

            with pytest.raises(McpError) as refused:
                await session.call_tool("file.read", {"path": "/etc/passwd"})
            assert refused.value.error.code == -32602
            data = refused.value.error.data
            assert data["kind"] == "invalid_params" and len(data["trace_id"]) == 32, data
