"""The browser on the Docker backend: the conversation's live container (runner-live, which carries Debian's
Chromium) runs it, as the jail's live sandbox does on the native backend. The same open-sandbox calls as
test_browser.py: a page served on the container's own loopback is navigated to and screenshotted (its known colour
block checked in the decoded PNG), and a navigation outside the container (no network) fails with the product's
error naming Chromium's `net::ERR_...`. Needs dockerd and the runner images, as scripts/test.sh sets up."""

import base64

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

import test_browser as page


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_the_browser_runs_in_the_conversations_container(docker_server):
    async with streamablehttp_client(page.osb_url(docker_server), headers=docker_server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await page.serve_the_page(session)
            url = f"http://127.0.0.1:{page.PORT}/page.html"
            assert page.result_of(await session.call_tool("browser.navigate", {"url": url})) == {"navigated": True}
            call = await session.call_tool("browser.screenshot", {"path": "shots/page.png"})
            assert page.result_of(call) == {"path": "/workspace/shots/page.png"}
            width, height, rows = page.decode_png(base64.b64decode(call.content[1].data))
            assert (width, height) == (1280, 800)
            for x, y in [(5, 5), (320, 200), (630, 390)]:
                assert rows[y][x] == page.BLOCK, (x, y, rows[y][x])
            assert rows[700][1200] == (255, 255, 255), rows[700][1200]

            with pytest.raises(McpError) as failed:
                await session.call_tool("browser.navigate", {"url": "http://198.51.100.1/"})
            assert "net::ERR_" in failed.value.error.data["message"], failed.value.error
