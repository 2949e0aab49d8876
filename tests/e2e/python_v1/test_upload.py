"""Files going in, through the official Python SDK against `sandlot serve` (native jail, as root): a file uploaded
with `sandbox_upload_file` is read by the code of the next run (so it is readable, and writable, by the sandbox's
uid), and a signed upload URL (PUT) puts a file the code reads too."""

import base64
import os

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


@pytest.mark.anyio
async def test_an_uploaded_file_is_used_by_code(server):
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            up = await session.call_tool("sandbox_upload_file", {"conversationId": "upload-e2e", "path": "in/sales.csv",
                                                                 "content": "region,amount\nnorth,3\nsouth,4\n"})
            assert up.isError is False, up
            assert (up.structuredContent["path"], up.structuredContent["size"]) == ("in/sales.csv", 30)
            assert httpx.get(up.structuredContent["url"]).text == "region,amount\nnorth,3\nsouth,4\n"
            blob = await session.call_tool("sandbox_upload_file", {"conversationId": "upload-e2e", "path": "b.bin",
                                                                   "contentBase64": base64.b64encode(b"\x00\xff").decode()})
            assert blob.isError is False, blob
            code = ("import csv\n"
                    "rows = list(csv.DictReader(open('/data/in/sales.csv')))\n"
                    "print('total', sum(int(r['amount']) for r in rows))\n"
                    "print('blob', open('/data/b.bin', 'rb').read().hex())\n"
                    "open('/data/in/sales.csv', 'a').write('east,5\\n')\n")
            ran = await session.call_tool("sandbox_run_code", {"conversationId": "upload-e2e", "language": "python", "code": code})
            assert ran.isError is False, ran
            assert ran.structuredContent["stdout"] == "total 7\nblob 00ff\n", ran

            bad = await session.call_tool("sandbox_upload_file", {"conversationId": "upload-e2e", "path": "../x", "content": "x"})
            assert bad.isError is True and "path" in bad.content[0].text, bad


def test_a_signed_upload_url_puts_a_file_code_reads(server):
    granted = httpx.post(f"{server.base_url}/v1/conversations/upload-put/uploads", headers=server.auth,
                         json={"path": "put.txt"}).json()
    assert granted["method"] == "PUT", granted
    assert httpx.put(granted["url"], content=b"from PUT\n").status_code == 201
    ran = httpx.post(server.mcp_url, headers={**server.auth, "Accept": "application/json, text/event-stream"},
                     json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code",
                           "arguments": {"conversationId": "upload-put", "language": "bash", "code": "cat /data/put.txt"}}})
    assert "from PUT" in ran.text, ran.text


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_uploads_through_symlinks_a_run_planted_write_nothing_outside(server):
    """ATTACK: a real run plants `/data/link -> /etc`, `/data/dir -> /` and `/data/x -> ../other-conversation/files`;
    uploads to `link/passwd`, `dir/tmp/evil` and `x/f` are refused, and the host and the other conversation are
    unchanged."""
    async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            other = await session.call_tool("sandbox_run_code", {"conversationId": "other-conversation", "language": "bash",
                                                                 "code": "echo mine > /data/secret"})
            assert other.isError is False, other
            planted = await session.call_tool("sandbox_run_code", {"conversationId": "planter", "language": "bash", "code":
                                              "ln -s /etc /data/link && ln -s / /data/dir && "
                                              "ln -s ../../other-conversation/files /data/x && ls -l /data"})
            assert planted.isError is False, planted
            passwd = open("/etc/passwd", "rb").read()
            for path in ["link/passwd", "dir/tmp/evil", "x/f", "x/secret", "dir/etc/evil"]:
                up = await session.call_tool("sandbox_upload_file", {"conversationId": "planter", "path": path, "content": "pwned"})
                assert up.isError is True and "symlink" in up.content[0].text, (path, up)
    assert open("/etc/passwd", "rb").read() == passwd
    assert not any(os.path.lexists(p) for p in ["/tmp/evil", "/etc/evil"])
    other_files = server.root / "other-conversation" / "files"
    assert sorted(p.name for p in other_files.iterdir()) == ["secret"]
    assert (other_files / "secret").read_text() == "mine\n"
