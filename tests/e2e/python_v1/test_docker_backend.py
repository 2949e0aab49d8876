"""`SANDLOT_BACKEND=docker sandlot serve` passes the same real-client test as the native backend, for all four
languages: initialize, list the tools and runners, run code that writes a file, download it by its URL."""

import base64
import json
import pathlib
import subprocess

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import call_in_background, wait_until
from test_images import PLOT, blocks, decode_png

REPO = pathlib.Path(__file__).resolve().parents[3]

PROGRAMS = {
    "python": ("open('/data/py.txt', 'w').write('python in docker\\n')\nprint('py ok')", "py.txt", b"python in docker\n"),
    "javascript": ("require('fs').writeFileSync('/data/js.txt', 'javascript in docker\\n'); console.log('js ok')", "js.txt", b"javascript in docker\n"),
    "typescript": ("import { writeFileSync } from 'fs';\nconst text: string = 'typescript in docker\\n';\nwriteFileSync('/data/ts.txt', text);\nconsole.log('ts ok')", "ts.txt", b"typescript in docker\n"),
    "bash": ("echo 'bash in docker' > /data/sh.txt; echo sh ok", "sh.txt", b"bash in docker\n"),
}


@pytest.mark.anyio
async def test_every_language_through_the_docker_backend(docker_server):
    async with streamablehttp_client(docker_server.mcp_url, headers=docker_server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            runners = await session.call_tool("sandbox.list_runners", {})
            images = {r["language"]: r["image"] for r in runners.structuredContent["languages"]}
            assert images == {"bash": "runner-bash:latest", "javascript": "runner-javascript:latest",
                              "python": "runner-python:latest",
                              # stripped in the server, run as JavaScript (an ES module: main.mjs for Node 18)
                              "typescript": "runner-javascript:latest"}
            for language, (code, name, content) in PROGRAMS.items():
                result = await session.call_tool("sandbox.run_code", {"conversationId": "docker-e2e", "language": language, "code": code})
                data = result.structuredContent
                assert result.isError is False, (language, data)
                assert result.content[0].text == f"outcome: ok, exit code 0, {data['durationMs']} ms\n{data['output']}"
                assert data["stdout"] == f"{name[:2]} ok\n"
                url = next(f["url"] for f in data["files"] if f["name"] == name)
                async with httpx.AsyncClient() as client:
                    assert (await client.get(url)).content == content
            failed = await session.call_tool("sandbox.run_code", {"conversationId": "docker-e2e", "language": "python", "code": "import sys; sys.exit(9)"})
            assert (failed.isError, failed.structuredContent["exitCode"]) == (True, 9)



@pytest.mark.anyio
async def test_plots_come_back_as_images_through_the_docker_backend(docker_server):
    """runner-python carries the scientific environment of scripts/python-env.sh (issue 20, item 5): list_runners
    reports its pins, and numpy with a matplotlib `plt.show()` comes back as an `image` block whose PNG decodes.
    Fails against a runner-python built without it (run scripts/build-runners.sh)."""
    pins = subprocess.run([str(REPO / "scripts/python-env.sh"), "--pins"], capture_output=True, text=True,
                          check=True).stdout.split()
    expected = dict(pin.split("==") for pin in pins)
    assert sorted(expected) == ["matplotlib", "numpy", "pandas"], pins
    async with streamablehttp_client(docker_server.mcp_url, headers=docker_server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            runners = await session.call_tool("sandbox_list_runners", {})
            python = next(r for r in runners.structuredContent["languages"] if r["language"] == "python")
            assert python["packages"] == expected, python

            code = "import numpy as np\n" + PLOT.replace("[3, 1, 2]", "np.array([3, 1, 2])")
            shown = await session.call_tool("sandbox_run_code", {"conversationId": "docker-img", "language": "python",
                                                                 "code": code})
            assert shown.isError is False, shown.structuredContent
            # stderr empty: matplotlib found the font cache built with the environment.
            assert (shown.structuredContent["stdout"], shown.structuredContent["stderr"]) == ("shown\n", "")
            [image] = blocks(shown, "image")
            assert image.mimeType == "image/png"
            assert decode_png(base64.b64decode(image.data)) == (400, 300)
            assert [link.name for link in blocks(shown, "resource_link")] == [".sandlot/figures/figure-1.png"]

@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_shutdown_removes_the_containers_of_runs_still_going(docker_server):
    import os
    import signal
    import subprocess

    owner = os.path.realpath(docker_server.root)

    def containers():
        out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=sandlot.owner={owner}"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    call_in_background(docker_server, {"conversationId": "docker-shutdown", "language": "bash", "code": "sleep 300",
                                        "timeoutSeconds": 600})
    wait_until(containers, 60, interval=0.1)
    assert containers(), "the run's container did not start"
    docker_server.process.send_signal(signal.SIGTERM)
    # The grace period (10 s), then the removal, which the server waits for (within 40 s).
    docker_server.process.wait(timeout=60)
    assert containers() == []


def test_a_server_that_exits_has_removed_the_container_of_a_dropped_request(docker_server):
    """The client goes away and SIGTERM comes at once: with no connection left the server exits without waiting
    for the grace period, while the cancelled run's container is still being removed by a task of its own."""
    import os
    import signal
    import socket
    import subprocess

    owner = os.path.realpath(docker_server.root)

    def containers(*flags):
        out = subprocess.run(["docker", "ps", *flags, "-q", "--filter", f"label=sandlot.owner={owner}"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "sandbox.run_code",
                       "arguments": {"conversationId": "docker-dropped", "language": "bash", "code": "sleep 300",
                                     "timeoutSeconds": 600}}}).encode()
    host, port = docker_server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {docker_server.token}\r\n"
            f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)
        wait_until(containers, 60, interval=0.1)  # running (docker ps without -a)
        assert containers(), "the run's container did not start"
    docker_server.process.send_signal(signal.SIGTERM)
    docker_server.process.wait(timeout=60)
    assert containers("-a") == []
