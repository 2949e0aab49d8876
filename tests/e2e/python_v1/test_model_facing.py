"""The tool surface as a model's API and a model see it, through the official Python SDK (which speaks 2025-11-25)
against `sandlot serve`: every listed tool name passes the model APIs' name rule, the dotted names stay callable,
every language name the server accepts is valid under the listed input schema, and a bad argument comes back as an
`isError` result naming the field (SEP-1303), which the model can read and correct."""

import re

import httpx
import jsonschema
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

# Anthropic's rule; OpenAI's adds {1,64}.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
# What the server's parser accepts (sandlot_core::Language::NAMES), in some of the spellings a model uses.
LANGUAGES = ["python", "python3", "py", "typescript", "ts", "javascript", "js", "node", "nodejs", "bash", "shell", "sh"]


@pytest.mark.anyio
async def test_names_schema_and_argument_errors(server):
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.protocolVersion == "2025-11-25"
            tools = (await session.list_tools()).tools
            names = [t.name for t in tools]
            assert names == ["sandbox_run_code", "sandbox_list_runners", "sandbox_upload_file", "sandbox_session", "sandbox_browser"]
            assert all(TOOL_NAME.match(n) and len(n) <= 64 for n in names), names

            schema = next(t for t in tools if t.name == "sandbox_run_code").inputSchema
            for language in LANGUAGES:
                jsonschema.validate({"conversationId": "names", "language": language, "code": "x"}, schema)

            # The dotted name is an alias: not listed, still callable.
            ran = await session.call_tool("sandbox.run_code", {"conversationId": "names", "language": "sh", "code": "echo hi"})
            assert (ran.isError, ran.structuredContent["stdout"]) == (False, "hi\n"), ran

            # A bad argument is a result the model reads, naming the field; the next call, corrected, works.
            bad = await session.call_tool("sandbox_run_code", {"conversationId": "names", "language": "py", "code": "print(1)",
                                                               "timeoutSeconds": "soon"})
            assert bad.isError is True and "timeoutSeconds" in bad.content[0].text, bad
            missing = await session.call_tool("sandbox_run_code", {"conversationId": "names", "code": "print(1)"})
            assert missing.isError is True and "language" in missing.content[0].text, missing
            fixed = await session.call_tool("sandbox_run_code", {"conversationId": "names", "language": "py", "code": "print(1)"})
            assert fixed.isError is False and fixed.structuredContent["stdout"] == "1\n", fixed


def test_older_protocol_versions_keep_32602(server):
    """A stateless request of a 2025-06-18 client: the bad argument stays a JSON-RPC error, as that client expects."""
    response = httpx.post(server.mcp_url, headers={**server.auth, "Accept": "application/json", "MCP-Protocol-Version": "2025-06-18"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code",
                                "arguments": {"conversationId": "names", "code": "1"}}}).json()
    assert response["error"]["code"] == -32602 and response["error"]["data"]["field"] == "language", response


@pytest.fixture
def anyio_backend():
    return "asyncio"
