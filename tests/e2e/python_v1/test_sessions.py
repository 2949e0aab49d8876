"""Live sandboxes (issue 31) against the real `sandlot serve` and jail, with the official MCP Python SDK: a
conversation's `session: true` calls share one live sandbox and its persistent interpreters (docs/mcp.md, "Live
sandboxes"). Python's variables, functions and imports persist; JavaScript and TypeScript share one interpreter; Bash
keeps its working directory and variables; a background server started by one call answers the next; codegen's Bash
keeps `cd` and its background shells serve the next Bash; open-sandbox's exec tools share the workspace's sandbox; a call's timeout interrupts it and keeps the state; a
memory bomb ends its call as out of memory and the next call says the state was lost; `sandbox_session` lists the
processes, restarts the interpreters and closes the sandbox; an idle sandbox ends (no process of it left on the host)
and so does every sandbox when the server stops; `/metrics` counts them. Default limits throughout."""

import httpx
import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client

from conftest import free_port, sandbox_processes, start_server, wait_until

# Polls a URL on the sandbox's loopback until it answers (a server just started takes a moment), for up to 10 s;
# prints the body, or nothing. No `exit`: in a persistent shell it would end the shell.
CURL_UNTIL_IT_ANSWERS = "for i in $(seq 100); do curl -sf {url} && break; sleep 0.1; done"


@pytest.fixture
def idle_server(root):
    """`sandlot serve` whose live sandboxes end after 3 s without a call."""
    yield from start_server(root, {"SANDLOT_SANDBOX_IDLE_SECS": "3"})


@pytest.fixture
def metrics_server(root):
    """`sandlot serve` with its metrics listener on a free port (`server.metrics_url`)."""
    port = free_port()
    for server in start_server(root, {"SANDLOT_METRICS_ADDR": f"127.0.0.1:{port}"}):
        server.metrics_url = f"http://127.0.0.1:{port}/metrics"
        yield server


class Sandlot:
    """One MCP session on sandlot's /mcp, calling run_code in one conversation with `session: true`."""

    def __init__(self, session, conversation):
        self.session, self.conversation = session, conversation

    async def run(self, language, code, **extra):
        arguments = {"conversationId": self.conversation, "language": language, "code": code, "session": True, **extra}
        return await self.session.call_tool("sandbox_run_code", arguments)

    async def ok(self, language, code, **extra):
        """Runs the code and returns its structured result, which must be a success."""
        result = await self.run(language, code, **extra)
        assert result.isError is False, result.content[0].text
        return result.structuredContent

    async def manage(self, action):
        result = await self.session.call_tool(
            "sandbox_session", {"conversationId": self.conversation, "action": action})
        assert result.isError is False, result
        return result.structuredContent


def connect(server):
    return streamablehttp_client(server.mcp_url, headers=server.auth)


@pytest.mark.anyio
async def test_python_variables_functions_and_imports_persist(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        py = Sandlot(session, "py-state")
        first = await py.ok("python", "import math\nx = 41\ndef grow(v):\n    return v + 1\n")
        second = await py.ok("python", "print(grow(x), math.floor(math.pi))")
        assert second["stdout"] == "42 3\n"
        assert first["session"]["id"] == second["session"]["id"]
        assert (first["session"]["calls"], second["session"]["calls"]) == (1, 2)
        assert (first["session"]["stateLost"], second["session"]["stateLost"]) == (False, False)
        # Without session, a fresh sandbox: nothing of the interpreter's state.
        fresh = await session.call_tool("sandbox_run_code", {
            "conversationId": "py-state", "language": "python", "code": "print('x' in globals())"})
        assert fresh.structuredContent["stdout"] == "False\n" and "session" not in fresh.structuredContent


@pytest.mark.anyio
async def test_javascript_and_typescript_share_one_interpreter(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        js = Sandlot(session, "js-ts")
        await js.ok("javascript", "var shared = 7; function twice(n) { return 2 * n; }")
        result = await js.ok("typescript", "const answer: number = twice(shared) * 3;\nconsole.log(answer);")
        assert result["stdout"] == "42\n"


@pytest.mark.anyio
async def test_bash_keeps_its_working_directory_and_variables(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        sh = Sandlot(session, "bash-state")
        await sh.ok("bash", "cd /tmp && GREETING=hello")
        assert (await sh.ok("bash", 'pwd; echo "$GREETING"'))["stdout"] == "/tmp\nhello\n"


@pytest.mark.anyio
async def test_a_background_server_answers_the_next_call(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        sh = Sandlot(session, "dev-server")
        await sh.ok("bash", "echo served-by-bash > page.txt\npython3 -m http.server 8000 >/dev/null 2>&1 &")
        answered = await sh.ok("bash", CURL_UNTIL_IT_ANSWERS.format(url="localhost:8000/page.txt"))
        assert answered["stdout"] == "served-by-bash\n"
        # The same from Python: a server started with subprocess.Popen, read with urllib in the next call.
        await sh.ok("python", (
            "import subprocess\n"
            "open('/tmp/py.txt', 'w').write('served-by-python')\n"
            "server = subprocess.Popen(['python3', '-m', 'http.server', '8001', '-d', '/tmp'],\n"
            "                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"))
        read_back = await sh.ok("python", (
            "import time, urllib.request\n"
            "for _ in range(100):\n"
            "    try:\n"
            "        print(urllib.request.urlopen('http://127.0.0.1:8001/py.txt').read().decode()); break\n"
            "    except OSError:\n"
            "        time.sleep(0.1)\n"))
        assert read_back["stdout"] == "served-by-python\n"


def codegen_url(server):
    return f"{server.base_url}/p/codegen/sse"


def bash(session, command, **extra):
    return session.call_tool("Bash", {"command": command, "description": "an end-to-end test command", **extra})


@pytest.mark.anyio
async def test_codegen_bash_keeps_cd_and_its_background_dev_server_answers(server):
    async with sse_client(codegen_url(server), headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            assert (await bash(session, "mkdir -p app && cd app")).content[0].text == ""
            assert (await bash(session, "pwd")).content[0].text == "/workspace/app\n"
            await bash(session, "echo from-the-dev-server > index.txt")
            # A background command is a process of its own: it starts in /workspace, not in the shell's directory.
            started = await bash(session, "python3 -m http.server 8000", run_in_background=True)
            shell_id = started.content[0].text.splitlines()[0].removeprefix("shell_id: ")
            answered = await bash(session, CURL_UNTIL_IT_ANSWERS.format(url="localhost:8000/app/index.txt"))
            assert answered.content[0].text == "from-the-dev-server\n"
            killed = await session.call_tool("KillShell", {"shell_id": shell_id})
            assert killed.content[0].text == f"killed: {shell_id}\n"
            refused = await bash(session, "curl -s localhost:8000/app/index.txt || echo refused")
            assert refused.content[0].text == "refused\n"


@pytest.mark.anyio
async def test_open_sandbox_s_exec_runs_in_the_workspace_s_live_sandbox(server):
    """`shell.exec` and `code.exec` are processes of the workspace's live sandbox: a server one leaves running in the
    background answers the next on the sandbox's loopback."""
    async with streamablehttp_client(f"{server.base_url}/p/open-sandbox/mcp", headers=server.auth) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()

            async def run(tool, arguments):
                result = await session.call_tool(tool, arguments)
                assert result.isError is not True, result
                return result.structuredContent

            await run("file.write", {"path": "/workspace/site/hello.txt", "content": "hello from exec"})
            start = "cd /workspace/site && python3 -m http.server 8000 >/dev/null 2>&1 &"
            assert (await run("shell.exec", {"command": "bash", "args": ["-c", start]}))["exit_code"] == 0
            fetched = await run("shell.exec", {
                "command": "bash", "args": ["-c", CURL_UNTIL_IT_ANSWERS.format(url="localhost:8000/hello.txt")]})
            assert (fetched["stdout"], fetched["exit_code"]) == ("hello from exec", 0), fetched
            read = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/hello.txt').read().decode())"
            by_python = await run("code.exec", {"runtime": "python", "args": ["-c", read]})
            assert (by_python["stdout"], by_python["exit_code"]) == ("hello from exec\n", 0), by_python


@pytest.mark.anyio
async def test_a_timed_out_call_is_interrupted_and_the_state_stays(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        py = Sandlot(session, "timeout-state")
        await py.ok("python", "x = 'kept'")
        spun = await py.run("python", "while True:\n    pass\n", timeoutSeconds=2)
        assert (spun.structuredContent["timedOut"], spun.structuredContent["outcome"]) == (True, "timeout")
        after = await py.ok("python", "print(x)")
        assert (after["stdout"], after["session"]["stateLost"]) == ("kept\n", False)


@pytest.mark.anyio
async def test_a_memory_bomb_ends_its_call_and_the_next_says_the_state_was_lost(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        py = Sandlot(session, "memory-bomb")
        await py.ok("python", "x = 1")
        bomb = await py.run("python", "blocks = [b'x' * (1 << 20) for _ in range(4096)]")
        assert (bomb.isError, bomb.structuredContent["outcome"]) == (True, "oom"), bomb.structuredContent
        after = await py.run("python", "print('x' in globals())")
        assert after.isError is False, after
        data = after.structuredContent
        assert (data["stdout"], data["session"]["stateLost"]) == ("False\n", True), data
        assert data["session"]["notice"], data
        # The model reads the notice on a line of its own, after the header and before the output.
        lines = after.content[0].text.splitlines()
        assert lines[1] == f"session state lost: {data['session']['notice']}" and lines[2] == "False", lines


@pytest.mark.anyio
async def test_sandbox_session_lists_restarts_and_closes(server):
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        sb = Sandlot(session, "managed")
        assert await sb.manage("status") == {"conversationId": "managed", "action": "status", "live": False}
        await sb.ok("python", "x = 1")
        # Its own session (setsid): the interpreters' restart leaves it, as any background process.
        await sb.ok("bash", "echo up > up.txt; setsid python3 -m http.server 8002 >/dev/null 2>&1 < /dev/null &")
        await sb.ok("bash", CURL_UNTIL_IT_ANSWERS.format(url="localhost:8002/up.txt"))

        status = await sb.manage("status")
        assert status["live"] is True and status["calls"] == 3, status
        assert any("http.server 8002" in p["command"] for p in status["processes"]), status["processes"]
        assert sorted(i["language"] for i in status["interpreters"]) == ["bash", "python"], status
        assert status["usage"]["memoryBytes"] > 0 and status["usage"]["memoryLimitBytes"] > 0, status
        assert status["idleSecondsLeft"] > 0 and status["endsAt"].endswith("Z"), status

        restarted = await sb.manage("restart")
        assert restarted["live"] is True and restarted["id"] == status["id"], restarted
        after = await sb.ok("python", "print('x' in globals())")
        assert after["stdout"] == "False\n" and after["session"]["id"] == status["id"], after
        assert (await sb.ok("bash", CURL_UNTIL_IT_ANSWERS.format(url="localhost:8002/up.txt")))["stdout"] == "up\n"

        closed = await sb.manage("close")
        assert (closed["live"], closed["closed"]) == (False, True), closed
        gone = await sb.ok("bash", "curl -s localhost:8002/up.txt || echo refused")
        assert gone["stdout"] == "refused\n", gone
        assert gone["session"]["id"] != status["id"] and gone["session"]["stateLost"] is True, gone


def status_over_rest(server, conversation):
    response = httpx.get(f"{server.base_url}/v1/conversations/{conversation}", headers=server.auth)
    assert response.status_code == 200, response.text
    return response.json()["live"]


@pytest.mark.anyio
async def test_an_idle_sandbox_ends_with_every_process_of_it(idle_server):
    server = idle_server
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        sb = Sandlot(session, "idle")
        first = await sb.ok("bash", "sleep 600 >/dev/null 2>&1 &\nx=1")
        assert sandbox_processes(), "the live sandbox has no process on the host"
        assert status_over_rest(server, "idle")["id"] == first["session"]["id"]
        # 3 s idle, then the reaper's next round (under a second here): 30 s is plenty on a loaded machine and far
        # below the default idle time of 900 s the bug of a setting not applied would show.
        wait_until(lambda: not sandbox_processes(), 30)
        assert sandbox_processes() == []
        assert status_over_rest(server, "idle") is None
        after = await sb.ok("bash", 'echo "x=${x:-unset}"')
        assert after["stdout"] == "x=unset\n" and after["session"]["stateLost"] is True, after
        assert after["session"]["id"] != first["session"]["id"]


@pytest.mark.anyio
async def test_a_restart_of_the_server_ends_every_live_sandbox(root):
    servers = start_server(root, {})
    server = next(servers)
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        await Sandlot(session, "restarted").ok("python", "x = 1")
        await Sandlot(session, "restarted-too").ok("bash", "sleep 600 >/dev/null 2>&1 &")
    assert sandbox_processes()
    next(servers, None)  # terminates it and waits for its exit
    assert sandbox_processes() == []
    again = start_server(root, {})
    server = next(again)
    try:
        async with connect(server) as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            after = await Sandlot(session, "restarted").ok("python", "print('x' in globals())")
            assert after["stdout"] == "False\n" and after["session"]["stateLost"] is True, after
            assert after["session"]["notice"], after
    finally:
        next(again, None)


def gauge(server, name):
    text = httpx.get(server.metrics_url).text
    values = [line.split()[-1] for line in text.splitlines() if line.split(" ")[0] == name]
    return float(values[0]) if values else None


@pytest.mark.anyio
async def test_metrics_count_the_live_sandboxes_and_their_memory(metrics_server):
    server = metrics_server
    assert gauge(server, "sandlot_live_sandboxes") == 0
    async with connect(server) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        sb = Sandlot(session, "measured")
        await sb.ok("python", "x = bytes(1 << 20)")
        assert gauge(server, "sandlot_live_sandboxes") == 1
        # The session manager measures every few seconds (at most 5 s between rounds).
        wait_until(lambda: gauge(server, "sandlot_live_sandbox_memory_bytes") > 0, 20)
        assert gauge(server, "sandlot_live_sandbox_memory_bytes") > 0
        await sb.manage("close")
        assert gauge(server, "sandlot_live_sandboxes") == 0
        listed = httpx.get(f"{server.base_url}/v1/conversations", headers=server.auth).json()
        assert [(c["conversationId"], c["live"]) for c in listed["conversations"]] == [("measured", None)]
