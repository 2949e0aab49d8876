"""Live output: a run that prints every 250 ms for 5 s sends its output as progress notifications while it runs,
all before the result (official Python SDK, Streamable HTTP)."""

import time

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

CODE = "import time\nfor i in range(20):\n    print('tick', i, flush=True)\n    time.sleep(0.25)\nprint('done')"


@pytest.mark.anyio
async def test_output_arrives_as_progress_before_the_result(server):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((time.monotonic(), progress, message))

    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(
                "sandbox.run_code", {"conversationId": "progress", "language": "python", "code": CODE},
                progress_callback=on_progress)
            finished = time.monotonic()
    assert result.structuredContent["stdout"] == "".join(f"tick {i}\n" for i in range(20)) + "done\n"
    assert len(seen) >= 5, seen
    assert all(at <= finished for at, _, _ in seen), "a progress notification came after the result"
    # The program prints for 5 s after its first line: live output comes seconds before the result, output held
    # back comes with it (on a loaded machine too: the margin is the program's own sleeps).
    assert finished - seen[0][0] > 2.5, "the first output came only at the end: not live"
    assert [p for _, p, _ in seen] == sorted(p for _, p, _ in seen), "progress must increase"
    assert "".join(m for _, _, m in seen) == result.structuredContent["stdout"]


@pytest.fixture
def anyio_backend():
    return "asyncio"
