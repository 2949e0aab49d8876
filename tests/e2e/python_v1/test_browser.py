"""The browser per conversation against the real `sandlot serve`, jail and Debian's Chromium, driven by the official
MCP Python SDK (`mcp` 1.x): open-sandbox's `browser.navigate` and `browser.screenshot` (and the extra `browser_*`
tools) at `/p/open-sandbox/mcp`, and sandlot's own `sandbox_browser` at `/mcp`.

The test page is served from inside the conversation's live sandbox (a background `python3 -m http.server` on its
own loopback, started with `shell.exec`, so the browser's sandbox is one a code call started with the server's
limits, which a browser raises), with a block of a known colour; the screenshot's PNG is decoded here (zlib and
struct, no imaging library) and that block's pixels checked. A navigation outside the sandbox (loopback only, no
egress policy) fails with the product's tool error naming Chromium's `net::ERR_...`. Two tenants' browsers share
nothing: a cookie and localStorage set in one are absent in the other (the same origin, each on its own loopback),
and their Chromium processes are in different pid namespaces. Restarting a conversation's live sandbox ends its
browser (the next call starts a new one), and closing it ends every Chromium process of it.

The times of a browser's cold start (the first navigate of a conversation) and of a warm navigate+screenshot are
printed (`-s` shows them), not asserted: docs/benchmarks.md has them.
"""

import base64
import hashlib
import json
import os
import struct
import time
import zlib

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

from conftest import SANDBOX_UIDS_FIRST, describe_processes, start_server, wait_until

BLOCK = (20, 160, 220)
PAGE = f"""<!doctype html><html><head><title>sandlot test page</title><style>
html, body {{ margin: 0; background: #ffffff; }}
#block {{ position: absolute; left: 0; top: 0; width: 640px; height: 400px; background: rgb{BLOCK}; }}
</style></head><body><div id="block"></div><input id="name" style="position:absolute; top:500px">
<select id="pick" style="position:absolute; top:550px"><option value="a">A</option><option value="b">B</option></select>
</body></html>"""
PORT = 8765
# The TCP ports listened on in the sandbox's network namespace (state 0A in /proc/net/tcp and tcp6).
LISTENING = ("ports = set()\nfor name in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
             "    for line in open(name).read().splitlines()[1:]:\n"
             "        fields = line.split()\n"
             "        if fields[3] == '0A': ports.add(int(fields[1].split(':')[1], 16))\n"
             "print(*sorted(ports))")


def osb_url(server):
    return f"{server.base_url}/p/open-sandbox/mcp"


def result_of(call):
    assert call.isError is not True, call
    assert json.loads(call.content[0].text) == call.structuredContent
    return call.structuredContent


def decode_png(data):
    """(width, height, rows of RGB(A) tuples) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, upleft = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - upleft
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - upleft)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else upleft)) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


async def serve_the_page(session):
    """Writes the page and serves the workspace on the sandbox's loopback, in the background; waits until it answers."""
    result_of(await session.call_tool("file.write", {"path": "site/page.html", "content": PAGE}))
    started = result_of(await session.call_tool("shell.exec", {"command": "bash", "args": [
        "-c", f"cd /workspace/site && nohup python3 -m http.server {PORT} --bind 127.0.0.1 >/dev/null 2>&1 &"]}))
    assert started["exit_code"] == 0, started
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/page.html', timeout=2)"
    deadline = time.monotonic() + 30
    while True:
        probed = result_of(await session.call_tool("code.exec", {"runtime": "python", "args": ["-c", probe]}))
        if probed["exit_code"] == 0:
            return
        assert time.monotonic() < deadline, probed
        time.sleep(0.2)


def chromium_processes():
    """This test session's sandboxes' Chromium processes on the host: {pid: its pid namespace}."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line.split()[1] for line in f if line.startswith("Uid:")))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            if SANDBOX_UIDS_FIRST <= uid <= SANDBOX_UIDS_FIRST + 999 and command.startswith(b"/usr/lib/chromium/"):
                found[int(pid)] = os.readlink(f"/proc/{pid}/ns/pid")
        except (OSError, StopIteration, ValueError):
            continue
    return found


@pytest.mark.anyio
async def test_navigate_then_screenshot_shows_the_page(server):
    async with streamablehttp_client(osb_url(server), headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await serve_the_page(session)
            url = f"http://127.0.0.1:{PORT}/page.html"
            began = time.monotonic()
            assert result_of(await session.call_tool("browser.navigate", {"url": url})) == {"navigated": True}
            cold = time.monotonic() - began

            began = time.monotonic()
            call = await session.call_tool("browser.screenshot", {"path": "shots/page.png"})
            shot_time = time.monotonic() - began
            assert result_of(call) == {"path": "/workspace/shots/page.png"}
            assert call.content[1].type == "image" and call.content[1].mimeType == "image/png", call.content
            png = base64.b64decode(call.content[1].data)
            conversation = "osb-" + hashlib.sha256(b"api-token").hexdigest()[:16]
            on_disk = server.root / conversation
            written = next(on_disk.rglob("shots/page.png"))
            assert written.read_bytes() == png
            width, height, rows = decode_png(png)
            assert (width, height) == (1280, 800)
            for x, y in [(5, 5), (320, 200), (630, 390)]:
                assert rows[y][x] == BLOCK, (x, y, rows[y][x])
            for x, y in [(700, 100), (1200, 700)]:
                assert rows[y][x] == (255, 255, 255), (x, y, rows[y][x])

            began = time.monotonic()
            result_of(await session.call_tool("browser_navigate", {"url": url + "?again"}))
            result_of(await session.call_tool("browser_screenshot", {"path": "shots/again.png"}))
            warm = time.monotonic() - began
            print(f"\nbrowser: cold start (first navigate) {cold:.2f} s; screenshot {shot_time:.2f} s; "
                  f"warm navigate+screenshot {warm:.2f} s")

            # The browser listens on no port of the sandbox (its debugger is a pipe the server holds): what listens
            # is the test's page server alone.
            listening = result_of(await session.call_tool("code.exec", {"runtime": "python", "args": ["-c", LISTENING]}))
            assert listening["stdout"].split() == [str(PORT)], listening

            # The extra tools, each with the product's result shape.
            assert result_of(await session.call_tool("browser_evaluate", {"expression": "document.title"})) == {
                "result": "sandlot test page"}
            assert result_of(await session.call_tool("browser_click", {"x": 60, "y": 510})) == {"clicked": True}
            assert result_of(await session.call_tool("browser_press_key", {"keys": "x"})) == {"pressed": True}
            field = "document.getElementById('name').value"
            assert result_of(await session.call_tool("browser_evaluate", {"expression": field})) == {"result": "x"}
            assert result_of(await session.call_tool(
                "browser_form_input_fill", {"selector": "#name", "value": "typed"})) == {"filled": True}
            assert result_of(await session.call_tool("browser_select", {"selector": "#pick", "value": "b"})) == {
                "selected": True}
            values = result_of(await session.call_tool(
                "browser_evaluate", {"expression": f"[{field}, document.getElementById('pick').value]"}))
            assert values == {"result": ["typed", "b"]}
            assert result_of(await session.call_tool("browser_scroll", {"x": 0, "y": 100})) == {"scrolled": True}
            assert result_of(await session.call_tool("browser_new_tab", {"url": url + "?tab"})) == {"index": 1}
            tabs = result_of(await session.call_tool("browser_tab_list", {}))["tabs"]
            assert [(t["index"], t["url"]) for t in tabs] == [(0, url + "?again"), (1, url + "?tab")], tabs
            assert result_of(await session.call_tool("browser_switch_tab", {"index": 0})) == {"switched": True}
            assert result_of(await session.call_tool("browser_close_tab", {"index": 1})) == {"closed": True}
            assert len(result_of(await session.call_tool("browser_tab_list", {}))["tabs"]) == 1

            with pytest.raises(McpError) as failed:
                await session.call_tool("browser_evaluate", {"expression": "no_such_name.x"})
            assert failed.value.error.code == -32010, failed.value.error
            with pytest.raises(McpError) as outside:
                await session.call_tool("browser.screenshot", {"path": "/etc/shot.png"})
            assert outside.value.error.code == -32602
            with pytest.raises(McpError) as big:
                await session.call_tool("browser_evaluate", {"expression": "'x'.repeat(600000)"})
            assert big.value.error.code == -32010 and "bytes as JSON" in big.value.error.data["message"], big.value

            # Chromium killed from inside the sandbox (its own processes): the next call starts a new browser.
            killed = result_of(await session.call_tool(
                "shell.exec", {"command": "pkill", "args": ["-KILL", "-f", "^/usr/lib/chromium/chromium"]}))
            assert killed["exit_code"] == 0, killed
            assert result_of(await session.call_tool("browser.navigate", {"url": url})) == {"navigated": True}
            title = result_of(await session.call_tool("browser_evaluate", {"expression": "document.title"}))
            assert title == {"result": "sandlot test page"}


@pytest.mark.anyio
async def test_a_navigation_outside_the_sandbox_fails_with_the_product_s_error(server):
    async with streamablehttp_client(osb_url(server), headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            with pytest.raises(McpError) as refused:
                # TEST-NET-2 (RFC 5737): no route from a sandbox with loopback only.
                await session.call_tool("browser.navigate", {"url": "http://198.51.100.1/"})
            error = refused.value.error
            assert error.code == -32010 and error.data["kind"] == "tool_error", error
            assert "net::ERR_" in error.data["message"] and "198.51.100.1" in error.data["message"], error.data


@pytest.mark.anyio
async def test_a_page_that_never_loads_times_out_after_15_s(server):
    async with streamablehttp_client(osb_url(server), headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # A server on the sandbox's loopback that accepts and never answers.
            hang = ("import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 8766)); s.listen(8)\n"
                    "held = []\nwhile True: held.append(s.accept())")
            started = result_of(await session.call_tool("shell.exec", {"command": "bash", "args": [
                "-c", f"nohup python3 -c \"{hang}\" >/dev/null 2>&1 &"]}))
            assert started["exit_code"] == 0, started
            began = time.monotonic()
            with pytest.raises(McpError) as slow:
                await session.call_tool("browser.navigate", {"url": "http://127.0.0.1:8766/"})
            took = time.monotonic() - began
            assert slow.value.error.code == -32010 and "timed out" in slow.value.error.data["message"], slow.value
            # The product's 15 s, and not much more: 30 s would be a wait that forgot its deadline.
            assert 14 < took < 30, took
            # The browser is still usable.
            assert result_of(await session.call_tool("browser_evaluate", {"expression": "1 + 1"})) == {"result": 2}


TOKENS = {"ci": "token-ci-" + os.urandom(8).hex(), "ops": "token-ops-" + os.urandom(8).hex()}


@pytest.fixture
def two_tenants(root):
    yield from start_server(root, {"MCP_API_TOKENS": ",".join(f"{n}:{t}" for n, t in TOKENS.items())})


@pytest.mark.anyio
async def test_two_tenants_browsers_share_nothing(two_tenants):
    server = two_tenants
    url = f"http://127.0.0.1:{PORT}/page.html"
    async with streamablehttp_client(osb_url(server), headers={"Authorization": f"Bearer {TOKENS['ci']}"}) as (
            read, write, _):
        async with ClientSession(read, write) as ci:
            await ci.initialize()
            await serve_the_page(ci)
            result_of(await ci.call_tool("browser.navigate", {"url": url}))
            set_script = "document.cookie = 'k=ci; max-age=3600'; localStorage.setItem('k', 'ci'); document.cookie"
            assert result_of(await ci.call_tool("browser_evaluate", {"expression": set_script})) == {"result": "k=ci"}
    async with streamablehttp_client(osb_url(server), headers={"Authorization": f"Bearer {TOKENS['ops']}"}) as (
            read, write, _):
        async with ClientSession(read, write) as ops:
            await ops.initialize()
            # The same origin (each sandbox has a loopback of its own, so both serve on the same port).
            await serve_the_page(ops)
            result_of(await ops.call_tool("browser.navigate", {"url": url}))
            read_script = "[document.cookie, localStorage.getItem('k')]"
            assert result_of(await ops.call_tool("browser_evaluate", {"expression": read_script})) == {
                "result": ["", None]}
    namespaces = set(chromium_processes().values())
    assert len(namespaces) == 2, describe_processes(chromium_processes())


@pytest.mark.anyio
async def test_sandbox_browser_screenshots_and_restart_and_close_end_the_browser(server):
    conversation = "browser-e2e"
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            wrote = await session.call_tool("sandbox_upload_file", {
                "conversationId": conversation, "path": "page.html", "content": PAGE})
            assert wrote.isError is not True, wrote
            navigated = await session.call_tool("sandbox_browser", {
                "conversationId": conversation, "action": "navigate", "url": "file:///data/page.html"})
            assert navigated.isError is not True, navigated
            shot = await session.call_tool("sandbox_browser", {
                "conversationId": conversation, "action": "screenshot", "path": "shot.png"})
            assert shot.isError is not True, shot
            assert shot.structuredContent["path"] == "shot.png", shot.structuredContent
            image = next(block for block in shot.content if block.type == "image")
            _, _, rows = decode_png(base64.b64decode(image.data))
            assert rows[100][100] == BLOCK
            assert (server.root / conversation).exists()
            assert chromium_processes(), "no Chromium process while the browser is open"

            failed = await session.call_tool("sandbox_browser", {
                "conversationId": conversation, "action": "navigate", "url": "http://198.51.100.1/"})
            assert failed.isError is True and "net::ERR_" in failed.content[0].text, failed

            # A restart ends the browser with the interpreters; the next call starts a new one.
            restarted = await session.call_tool("sandbox_session", {"conversationId": conversation, "action": "restart"})
            assert restarted.isError is not True, restarted
            wait_until(lambda: not chromium_processes(), 10)
            assert not chromium_processes(), describe_processes(chromium_processes())
            again = await session.call_tool("sandbox_browser", {
                "conversationId": conversation, "action": "evaluate", "expression": "location.href"})
            assert again.structuredContent["result"] == "about:blank", again
            assert chromium_processes()

            closed = await session.call_tool("sandbox_session", {"conversationId": conversation, "action": "close"})
            assert closed.structuredContent["closed"] is True, closed
            # Closing returns once the sandbox is gone; 10 s is for a loaded machine, and a browser left running
            # would stay for ever.
            wait_until(lambda: not chromium_processes(), 10)
            assert not chromium_processes(), describe_processes(chromium_processes())
