"""openai-agents (the OpenAI Agents SDK) against `sandlot serve`: its MCP client lists sandlot's tools and turns them
into the function tools it sends to OpenAI's API unchanged; every name it would send must pass that API's rule
(`^[a-zA-Z0-9_-]{1,64}$`: a dotted name makes the API refuse the whole request), and a call the model makes goes
through to a run. No model is called: the test stops where the request to the model would be sent.

Run: `.venv-agents/bin/python -m pytest -q tests/e2e/agents` (as root, after `cargo build --bin sandlot`; the venv is
made by scripts/setup.sh)."""

import json
import re

import pytest
from agents import Agent
from agents.mcp import MCPServerStreamableHttp
from agents.models.chatcmpl_converter import Converter as ChatCompletionsConverter
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext

OPENAI_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.mark.anyio
async def test_tool_names_pass_openai_rule_and_calls_work(server):
    params = {"url": server.mcp_url, "headers": server.auth, "timeout": 30}
    async with MCPServerStreamableHttp(params, name="sandlot", client_session_timeout_seconds=30) as mcp:
        agent = Agent(name="coder", instructions="Run code when asked.", mcp_servers=[mcp])
        context = RunContextWrapper(context=None)
        tools = await agent.get_all_tools(context)
        # What goes into the `tools` of the request to the model (Chat Completions form; Responses uses the same name).
        sent = [ChatCompletionsConverter.tool_to_openai(tool)["function"]["name"] for tool in tools]
        assert sorted(sent) == ["sandbox_browser", "sandbox_list_runners", "sandbox_run_code", "sandbox_session", "sandbox_upload_file"], sent
        assert all(OPENAI_TOOL_NAME.match(name) for name in sent), sent

        # The model calls a tool by the name it was given; the SDK invokes it over MCP.
        run_code = next(tool for tool in tools if tool.name == "sandbox_run_code")
        arguments = json.dumps({"conversationId": "agents", "language": "python", "code": "print(6 * 7)"})
        tool_context = ToolContext(context=None, tool_name=run_code.name, tool_call_id="call_1", tool_arguments=arguments)
        output = await run_code.on_invoke_tool(tool_context, arguments)
        assert "42" in str(output), output

        # A bad argument the SDK's own schema check lets through (a deadline over the server's ceiling) reaches the
        # model as text naming the field (SEP-1303), so it can correct the call.
        bad = json.dumps({"conversationId": "agents", "language": "python", "code": "1", "timeoutSeconds": 100000})
        tool_context = ToolContext(context=None, tool_name=run_code.name, tool_call_id="call_2", tool_arguments=bad)
        output = await run_code.on_invoke_tool(tool_context, bad)
        assert "timeoutSeconds" in str(output), output


@pytest.fixture
def anyio_backend():
    return "asyncio"
