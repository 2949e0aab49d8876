"""Files are MCP resources, over stdio with no HTTP server (official Python SDK 1.x, `sandlot stdio`):
- a run writes a text file and a PNG; `resources/list` lists them, `read_resource` gives the text as text and the
  PNG as a blob that decodes to the same bytes;
- the attack: a run plants symlinks in /data to /etc/passwd, to another conversation's file and to the server's
  history database; `read_resource` of each is refused and no byte of a target comes back."""

import base64
import struct
import zlib

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

from conftest import SANDBOX_UIDS, sandlot_binary

# A valid 2x2 RGBA PNG built with the standard library only: the same function runs in the sandbox and here.
MAKE_PNG = '''
import struct, zlib
def make_png():
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    rows = b"".join(b"\\x00" + bytes([255, 0, 0, 255, 0, 0, 255, 128]) for _ in range(2))
    return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
'''
WRITE_FILES = MAKE_PNG + '''
import os
os.makedirs("plots", exist_ok=True)
open("plots/tiny plot.png", "wb").write(make_png())
open("notes.txt", "w", encoding="utf-8").write("héllo from the sandbox\\n")
print("ok")
'''
namespace = {}
exec(MAKE_PNG, namespace)
EXPECTED_PNG = namespace["make_png"]()


def stdio_params(root):
    env = {"SANDBOX_ROOT": str(root), "SANDLOT_LOG": "warn", "PATH": "/usr/local/bin:/usr/bin:/bin",
           "SANDLOT_SANDBOX_UIDS": SANDBOX_UIDS}
    return StdioServerParameters(command=sandlot_binary(), args=["stdio"], env=env)


async def run(session, conversation, code):
    result = await session.call_tool("sandbox_run_code", {"conversationId": conversation, "language": "python", "code": code})
    assert result.isError is False, result
    return result


@pytest.mark.anyio
async def test_a_run_s_text_and_png_are_read_back_over_stdio(root):
    async with stdio_client(stdio_params(root)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await run(session, "res", WRITE_FILES)

            templates = await session.list_resource_templates()
            assert "sandlot://conversations/{conversationId}/files/{path}" in [t.uriTemplate for t in templates.resourceTemplates]
            listed = await session.list_resources()
            uris = [str(r.uri) for r in listed.resources]
            text_uri = "sandlot://conversations/res/files/notes.txt"
            png_uri = "sandlot://conversations/res/files/plots/tiny%20plot.png"
            assert text_uri in uris and png_uri in uris, uris

            text = (await session.read_resource(AnyUrl(text_uri))).contents[0]
            assert text.text == "héllo from the sandbox\n" and text.mimeType == "text/plain"
            png = (await session.read_resource(AnyUrl(png_uri))).contents[0]
            assert png.mimeType == "image/png"
            assert base64.b64decode(png.blob) == EXPECTED_PNG

            with pytest.raises(McpError) as missing:
                await session.read_resource(AnyUrl("sandlot://conversations/res/files/nope.txt"))
            assert missing.value.error.code == -32002


@pytest.mark.anyio
async def test_symlinks_a_run_plants_in_data_are_never_followed_by_read_resource(root):
    history_db = root / ".sandlot" / "history.db"
    plant = f'''
import os
os.symlink("/etc/passwd", "passwd")
os.symlink("{root}/victim/files/secret.txt", "victim.txt")
os.symlink("{root}/victim/files", "victim-dir")
os.symlink("{history_db}", "history.db")
open("ok.txt", "w").write("fine")
print("planted")
'''
    async with stdio_client(stdio_params(root)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await run(session, "victim", "open('secret.txt', 'w').write('VICTIM-SECRET')")
            await run(session, "attacker", plant)
            assert history_db.is_file() and (root / "victim/files/secret.txt").is_file()
            history_bytes = history_db.read_bytes()[:16]  # "SQLite format 3\0"
            for path in ["passwd", "victim.txt", "victim-dir/secret.txt", "history.db"]:
                with pytest.raises(McpError) as refused:
                    await session.read_resource(AnyUrl(f"sandlot://conversations/attacker/files/{path}"))
                error = refused.value.error
                assert error.code == -32602 and "symlink" in error.message, (path, error)
                said = f"{error.message} {error.data}"
                for leaked in ["root:x:0:0", "VICTIM-SECRET", history_bytes.decode("latin-1").rstrip("\0")]:
                    assert leaked not in said, (path, said)
            ok = (await session.read_resource(AnyUrl("sandlot://conversations/attacker/files/ok.txt"))).contents[0]
            assert ok.text == "fine"
            listed = [str(r.uri) for r in (await session.list_resources()).resources]
            assert [u for u in listed if u.startswith("sandlot://conversations/attacker/")] == \
                ["sandlot://conversations/attacker/files/ok.txt"], listed


@pytest.fixture
def anyio_backend():
    return "asyncio"
