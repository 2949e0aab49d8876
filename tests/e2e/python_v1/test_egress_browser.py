"""The browser on the egress leash: a conversation's Chromium reaches an allowed host of the test internet
(tests/e2e/internet) through sandlot's proxy, and a navigation to a denied host fails with open-sandbox's tool
error, over plain HTTP (the proxy's refusal, told from a page by its header) and over HTTPS (no tunnel)."""

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

from internet import servers


@pytest.mark.anyio
async def test_the_browser_reaches_allowed_hosts_only(egress_server):
    url = f"{egress_server.base_url}/p/open-sandbox/mcp"
    async with streamablehttp_client(url, headers=egress_server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            navigated = await session.call_tool("browser.navigate", {"url": "http://allowed.test/page"})
            assert navigated.isError is not True and navigated.structuredContent == {"navigated": True}, navigated
            text = await session.call_tool("browser_evaluate", {"expression": "document.body.innerText"})
            assert text.structuredContent == {"result": "hello from allowed.test path /page\n"}, text
            for denied, words in [("http://denied.test/", "egress proxy refused"), ("https://denied.test/", "net::ERR_")]:
                with pytest.raises(McpError) as refused:
                    await session.call_tool("browser.navigate", {"url": denied})
                error = refused.value.error
                assert error.code == -32010 and error.data["kind"] == "tool_error", error
                assert words in error.data["message"], error.data
