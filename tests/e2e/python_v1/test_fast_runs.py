"""Python runs forked from the server's templates (issue 32) against the real `sandlot serve` and jail, with the
official MCP Python SDK and default settings: stateless runs are forked (their parent is outside their pid
namespace), each a fresh sandbox with its own random state; the scientific stack is preloaded and its state does not
leak from one run to the next; a burst of concurrent calls is forked throughout and the template serves on after it;
a session's Python interpreter is forked too; and with `SANDLOT_PYTHON_TEMPLATE=false` the same code gives the same
results from an interpreter of its own."""

import asyncio

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import python_env, start_server

FORKED = "import os as _os\nprint('forked' if _os.getppid() == 0 else 'execd')\n"

LEAVE_STATE = FORKED + """import numpy as np, pandas as pd, matplotlib.pyplot as plt, random
pd.set_option('display.max_rows', 3)
np.set_printoptions(precision=1)
plt.rcParams['lines.linewidth'] = 9
plt.figure()
print(pd.get_option('display.max_rows'), len(plt.get_fignums()))
print(np.random.rand(), random.random())
"""

LOOK_AT_STATE = FORKED + """import numpy as np, pandas as pd, matplotlib, matplotlib.pyplot as plt, random
print(pd.get_option('display.max_rows'), np.get_printoptions()['precision'], plt.rcParams['lines.linewidth'],
      len(plt.get_fignums()), matplotlib.get_backend())
print(np.random.rand(), random.random())
"""


@pytest.fixture
def exec_science_server(root):
    """The scientific server with every Python run starting its own interpreter."""
    yield from start_server(root, {"SANDLOT_PYTHON": str(python_env() / "bin/python"),
                                   "SANDLOT_PYTHON_TEMPLATE": "false"})


async def run(server, conversation, code, session=False):
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _), \
            ClientSession(read, write) as client:
        await client.initialize()
        result = await client.call_tool("sandbox_run_code", {
            "conversationId": conversation, "language": "python", "code": code, "session": session})
        assert result.isError is False, result.content[0].text
        return result.structuredContent


async def wait_for_templates(server):
    import httpx
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            checks = (await http.get(f"{server.base_url}/readyz", headers=server.auth)).json()["checks"]
            if all(c["detail"].startswith("ready") for c in checks if c["name"] == "python-template"):
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the Python templates did not get ready")


@pytest.mark.anyio
async def test_stateless_runs_are_forked_fresh_sandboxes(server):
    await wait_for_templates(server)
    first = await run(server, "fresh", FORKED + "import random\nopen('/tmp/x', 'w').write('x')\nprint(random.random())")
    second = await run(server, "fresh", FORKED + "import os, random\nprint(os.path.exists('/tmp/x'), random.random())")
    assert first["stdout"].startswith("forked\n") and second["stdout"].startswith("forked\nFalse ")
    assert first["stdout"].split()[-1] != second["stdout"].split()[-1]


@pytest.mark.anyio
async def test_preloaded_modules_start_pristine_in_every_run(science_server):
    await wait_for_templates(science_server)
    left = await run(science_server, "pristine", LEAVE_STATE)
    assert left["stdout"].splitlines()[:2] == ["forked", "3 1"], left
    looked = await run(science_server, "pristine", LOOK_AT_STATE)
    lines = looked["stdout"].splitlines()
    assert lines[:2] == ["forked", "60 8 1.5 0 Agg"], looked
    assert lines[2] != left["stdout"].splitlines()[2], "the same random state in two runs"


@pytest.mark.anyio
async def test_without_templates_the_same_code_gives_the_same_results(exec_science_server):
    left = await run(exec_science_server, "pristine", LEAVE_STATE)
    assert left["stdout"].splitlines()[:2] == ["execd", "3 1"], left
    looked = await run(exec_science_server, "pristine", LOOK_AT_STATE)
    assert looked["stdout"].splitlines()[:2] == ["execd", "60 8 1.5 0 Agg"], looked


@pytest.mark.anyio
async def test_a_burst_is_forked_throughout_and_the_template_serves_on(server):
    await wait_for_templates(server)
    code = FORKED + "import random\nprint(random.getrandbits(64))"
    results = await asyncio.gather(*(run(server, f"burst-{i}", code) for i in range(16)))
    assert all(r["stdout"].startswith("forked\n") for r in results), [r["stdout"] for r in results]
    assert len({r["stdout"] for r in results}) == 16, "two runs shared their random state"
    after = await run(server, "burst-after", code)
    assert after["stdout"].startswith("forked\n")


@pytest.mark.anyio
async def test_a_sessions_python_interpreter_is_forked_and_keeps_its_state(science_server):
    await wait_for_templates(science_server)
    first = await run(science_server, "warm", FORKED + "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})", True)
    assert first["stdout"] == "forked\n", first
    second = await run(science_server, "warm", "print(int(df.a.sum()))", True)
    assert second["stdout"] == "3\n", second
