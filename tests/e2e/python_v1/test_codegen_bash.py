"""codegen-sandbox's Bash, BashOutput and KillShell against the real `sandlot serve` and jail, with the official MCP
Python SDK's legacy SSE client at `/p/codegen/sse` (docs/profiles.md, "codegen-sandbox: Bash and scrubbing"): the
exit trailer in the workspace, the denylist, a timeout ending the command, a background command read twice with
BashOutput then killed (its processes gone, its run in the history), an AWS key and a GitHub token printed by code
scrubbed. With live sandboxes the commands run in the workspace's persistent shell, which stays (test_sessions.py has
what persists), so these tests look for their commands' processes by command line."""

import hashlib
import time

import httpx
import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client

from conftest import sandbox_processes


def codegen_url(server):
    return f"{server.base_url}/p/codegen/sse"


def text_of(result):
    assert len(result.content) == 1 and result.content[0].type == "text", result
    return result.content[0].text


def bash(session, command, **extra):
    return session.call_tool("Bash", {"command": command, "description": "an end-to-end test command", **extra})


def runs_of(server, command):
    """The history's records of runs of `command` (by its hash), newest first."""
    runs = httpx.get(f"{server.base_url}/v1/runs", headers=server.auth).json()["runs"]
    digest = hashlib.sha256(command.encode()).hexdigest()
    return [r for r in runs if r["codeSha256"] == digest]


def process_running(command):
    """Whether a process of a sandbox of this test session has exactly the command line `command`."""
    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return None
    return any(cmdline(pid) == command for pid in sandbox_processes())


def eventually(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.anyio
async def test_bash_runs_in_the_workspace_with_the_product_s_texts(server):
    async with sse_client(codegen_url(server), headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await bash(session, "pwd; echo out; sleep 0.2; echo err >&2; exit 3")
            assert (result.isError, text_of(result)) == (False, "/workspace\nout\nerr\nexit: 3\n")
            result = await bash(session, "echo fine")
            assert (result.isError, text_of(result)) == (False, "fine\n")
            rejected = await bash(session, "ls && sudo id")
            assert rejected.isError is True
            assert text_of(rejected) == 'command rejected: command uses denylisted token "sudo"'
            missing = await session.call_tool("Bash", {"command": "ls"})
            assert (missing.isError, text_of(missing)) == (True, "description is required")
            scrubbed = await bash(
                session, "printf 'AKIA%s\\n' IOSFODNN7EXAMPLE; python3 -c \"print('ghp_' + 'x' * 36)\""
            )
            assert text_of(scrubbed) == "[REDACTED:aws-access-key]\n[REDACTED:github-pat]\n"


@pytest.mark.anyio
async def test_a_timeout_ends_the_command(server):
    async with sse_client(codegen_url(server), headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await bash(session, "sleep 1001 & echo started; sleep 1000", timeout=1)
            assert (result.isError, text_of(result)) == (False, "started\nbash: timed out after 1s\nexit: 124\n")
            # The command itself is gone; what it put in the background stays in a persistent shell (as in Claude
            # Code's) until the live sandbox ends, and dies with the sandbox without one.
            assert eventually(lambda: not process_running("sleep 1000")), sandbox_processes()
            after = await bash(session, "echo after")
            assert (after.isError, text_of(after)) == (False, "after\n")


@pytest.mark.anyio
async def test_a_background_command_is_read_twice_then_killed(server):
    async with sse_client(codegen_url(server), headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            command = "echo first; sleep 1000"
            started = await bash(session, command, run_in_background=True)
            first_line, rest = text_of(started).split("\n", 1)
            shell_id = first_line.removeprefix("shell_id: ")
            assert rest == f"started in background: {command}\n"
            assert eventually(lambda: process_running("sleep 1000")), "the background command never started"
            for _ in range(2):
                deadline = time.monotonic() + 20
                while True:
                    output = text_of(await session.call_tool("BashOutput", {"shell_id": shell_id}))
                    if "\nfirst\n" in output or time.monotonic() > deadline:
                        break
                head, started_at = output.split("started: ", 1)
                assert head == f"command: {command}\nstatus: running\n"
                assert started_at.split("\n\n", 1)[1] == "--- stdout (6 bytes) ---\nfirst\n--- stderr (0 bytes) ---\n"
            [running] = runs_of(server, command)
            assert (running["state"], running["language"], running["caller"]) == ("running", "bash", "api-token")
            assert running["conversationId"].startswith("codegen-"), running
            killed = await session.call_tool("KillShell", {"shell_id": shell_id})
            assert (killed.isError, text_of(killed)) == (False, f"killed: {shell_id}\n")
            assert eventually(lambda: not process_running("sleep 1000")), sandbox_processes()
            [ended] = runs_of(server, command)
            assert (ended["id"], ended["state"], ended["outcome"]) == (running["id"], "finished", "cancelled"), ended
            gone = await session.call_tool("BashOutput", {"shell_id": shell_id})
            assert (gone.isError, text_of(gone)) == (True, f"unknown shell_id: {shell_id}")


@pytest.mark.anyio
async def test_the_server_stopping_kills_background_shells(server):
    import signal

    async with sse_client(codegen_url(server), headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            started = await bash(session, "sleep 1000", run_in_background=True)
            assert started.isError is False, started
            assert eventually(lambda: sandbox_processes()), "the background command never started"
            stopping = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            # At once, not after the grace period a foreground run gets: a background shell outlives no server.
            assert eventually(lambda: not sandbox_processes(), 8), sandbox_processes()
            assert time.monotonic() - stopping < 8
