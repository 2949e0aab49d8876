"""Protocol 2026-07-28 with the official Python SDK 2.x (`mcp.Client`): over stdio its `server/discover` probe is
answered (rmcp) and the connection speaks 2026-07-28, where log messages are asked for per request
(`_meta["io.modelcontextprotocol/logLevel"]`) and a resource that does not exist is -32602 (SEP-2164). Beside it the
same client pinned to the initialize handshake (2025-11-25: the session's `logging/setLevel`, -32002) and pinned to
2026-07-28 over Streamable HTTP (the rest of 2026-07-28 over HTTP: test_http_2026.py)."""

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import sandlot_binary

LOG_LEVEL = "io.modelcontextprotocol/logLevel"
# One line on each stream: stdout comes as `info` log messages, stderr as `warning`.
CODE = "import sys\nsys.stdout.write('to stdout\\n')\nsys.stdout.flush()\nsys.stderr.write('to stderr\\n')"
BOTH = {"stdout": ("info", "to stdout\n"), "stderr": ("warning", "to stderr\n")}
STDERR = {"stderr": BOTH["stderr"]}


class Logs:
    """The `notifications/message` a client received, taken one call at a time as {stream: (level, text)}: the
    texts of a stream joined (a line may come in pieces when the program's writes are slow to arrive; the two
    streams' order is not what these tests are about)."""

    def __init__(self):
        self.received = {}

    async def __call__(self, params):
        assert params.logger == "sandlot"
        level, text = self.received.get(params.data["stream"], (params.level, ""))
        assert level == params.level
        self.received[params.data["stream"]] = (level, text + params.data["text"])

    def take(self):
        taken, self.received = self.received, {}
        return taken


async def run(client, meta=None):
    arguments = {"conversationId": "p2026", "language": "python", "code": CODE}
    result = await client.call_tool("sandbox_run_code", arguments, meta=meta)
    assert result.structured_content["success"] is True, result
    return result.structured_content["runId"]


async def read_error(client, uri):
    with pytest.raises(MCPError) as raised:
        await client.read_resource(uri)
    return raised.value.error


def stdio(server):
    return StdioServerParameters(command=sandlot_binary(), args=["stdio"], env=server.stdio_env)


@pytest.mark.anyio
async def test_stdio_at_2026_07_28_logs_per_request_and_unknown_runs_are_invalid_params(server):
    logs = Logs()
    async with Client(stdio(server), logging_callback=logs) as client:
        assert client.protocol_version == "2026-07-28"
        run_id = await run(client, meta={LOG_LEVEL: "info"})
        assert logs.take() == BOTH
        await run(client, meta={LOG_LEVEL: "warning"})
        assert logs.take() == STDERR
        # A request that does not ask gets none, even after others asked (there is no session level to keep).
        await run(client)
        assert logs.take() == {}

        output = await client.read_resource(f"sandlot://runs/{run_id}/output")
        assert '"to stdout\\n"' in output.contents[0].text
        for uri in ["sandlot://runs/nope", "sandlot://runs/nope/output"]:
            error = await read_error(client, uri)
            assert (error.code, error.message, error.data) == (-32602, 'no run "nope" in the history', {"uri": uri})


@pytest.mark.anyio
async def test_stdio_with_initialize_keeps_the_session_level_and_a_request_s_own_wins(server):
    logs = Logs()
    async with Client(stdio(server), logging_callback=logs, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        await run(client)
        assert logs.take() == {}
        # Asked by the request alone, with no session level.
        await run(client, meta={LOG_LEVEL: "warning"})
        assert logs.take() == STDERR
        await client.set_logging_level("info")
        await run(client)
        assert logs.take() == BOTH
        # The request's own level, for that request only.
        await run(client, meta={LOG_LEVEL: "error"})
        assert logs.take() == {}
        await run(client)
        assert logs.take() == BOTH

        error = await read_error(client, "sandlot://runs/nope")
        assert (error.code, error.data) == (-32002, {"uri": "sandlot://runs/nope"})


@pytest.mark.anyio
async def test_streamable_http_at_2026_07_28_logs_per_request(server):
    logs = Logs()
    http = httpx2.AsyncClient(headers=server.auth, timeout=60)
    transport = streamable_http_client(server.mcp_url, http_client=http)
    async with Client(transport, logging_callback=logs, mode="2026-07-28") as client:
        await run(client, meta={LOG_LEVEL: "info"})
        assert logs.take() == BOTH
        await run(client)
        assert logs.take() == {}
        error = await read_error(client, "sandlot://runs/nope")
        assert (error.code, error.data) == (-32602, {"uri": "sandlot://runs/nope"})


@pytest.fixture
def anyio_backend():
    return "asyncio"
