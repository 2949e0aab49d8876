"""`SANDLOT_BACKEND=docker sandlot serve` passes the same real-client test as the native backend, for all four
languages: initialize, list the tools and runners, run code that writes a file, download it by its URL."""

import json

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import call_in_background, wait_until

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
                              "python": "runner-python:latest", "typescript": "runner-typescript:latest"}
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
