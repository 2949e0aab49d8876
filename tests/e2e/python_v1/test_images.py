"""Plots and images reach the model (issue 20, items 2 and 5), with the official Python MCP SDK (`mcp` 1.x) over
Streamable HTTP, against `sandlot serve` whose Python runner is the scientific environment of scripts/python-env.sh
($SANDLOT_TEST_PYTHON_ENV): a matplotlib `plt.show()` comes back as an `image` block whose PNG decodes; a PNG the
code writes comes back as an image and a `resource_link`; files of earlier runs do not come back again."""

import base64
import struct
import zlib

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

PLOT = """
import matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=100)
plt.plot([1, 2, 3], [3, 1, 2])
plt.show()
print("shown")
"""

# A 3x2 PNG written with the standard library only.
WRITE_PNG = r"""
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
raw = b"".join(b"\0" + b"\xff\x00\x00" * 3 for _ in range(2))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
open("out/red.png", "wb").write(png)
open("out/notes.txt", "w").write("hello")
"""


def decode_png(data):
    """(width, height) of a PNG, after checking its signature, every chunk's CRC and that its pixels inflate."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
        if kind == b"IEND":
            break
    assert size is not None and zlib.decompress(idat), "no IHDR or no pixel data"
    return size


def blocks(result, kind):
    return [block for block in result.content if block.type == kind]


@pytest.mark.anyio
async def test_plots_and_images_come_back_as_image_blocks(science_server):
    async with streamablehttp_client(science_server.mcp_url, headers=science_server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            runners = await session.call_tool("sandbox_list_runners", {})
            python = next(r for r in runners.structuredContent["languages"] if r["language"] == "python")
            assert sorted(python["packages"]) == ["matplotlib", "numpy", "pandas"], python

            # plt.show() without a file: the figure arrives as a PNG of 400x300 pixels.
            shown = await session.call_tool("sandbox_run_code", {"conversationId": "img", "language": "python",
                                                                 "code": PLOT})
            assert shown.isError is False, shown.structuredContent
            assert shown.structuredContent["stdout"] == "shown\n"
            # matplotlib found its font cache: no rebuild (which says so on stderr) in the run.
            assert shown.structuredContent["stderr"] == ""
            [image] = blocks(shown, "image")
            assert image.mimeType == "image/png"
            assert decode_png(base64.b64decode(image.data)) == (400, 300)
            [link] = blocks(shown, "resource_link")
            assert link.name == ".sandlot/figures/figure-1.png" and link.mimeType == "image/png"

            # A PNG and a text file written by code: the image, and a link for each, the URL downloading the bytes.
            wrote = await session.call_tool("sandbox_run_code", {"conversationId": "img", "language": "bash",
                                                                 "code": "mkdir -p out"})
            assert blocks(wrote, "image") == [] and blocks(wrote, "resource_link") == []
            wrote = await session.call_tool("sandbox_run_code", {"conversationId": "img", "language": "python",
                                                                 "code": WRITE_PNG})
            assert wrote.isError is False, wrote.structuredContent
            [image] = blocks(wrote, "image")
            png = base64.b64decode(image.data)
            assert (image.mimeType, decode_png(png)) == ("image/png", (3, 2))
            links = {link.name: link for link in blocks(wrote, "resource_link")}
            assert sorted(links) == ["out/notes.txt", "out/red.png"]
            assert (links["out/red.png"].mimeType, links["out/red.png"].size) == ("image/png", len(png))
            assert links["out/notes.txt"].mimeType == "text/plain"
            async with httpx.AsyncClient() as client:
                assert (await client.get(str(links["out/red.png"].uri))).content == png

            # A run that changes nothing: the earlier figure and PNG stay listed in files, but no block comes back.
            again = await session.call_tool("sandbox_run_code", {"conversationId": "img", "language": "python",
                                                                 "code": "print(1)"})
            assert blocks(again, "image") == [] and blocks(again, "resource_link") == []
            assert sorted(f["name"] for f in again.structuredContent["files"]) == [
                ".sandlot/figures/figure-1.png", "out/notes.txt", "out/red.png"]
            # A second plt.show() in a later run: only the new figure comes back.
            second = await session.call_tool("sandbox_run_code", {"conversationId": "img", "language": "python",
                                                                  "code": PLOT})
            assert [link.name for link in blocks(second, "resource_link")] == [".sandlot/figures/figure-2.png"]
            assert len(blocks(second, "image")) == 1


@pytest.mark.anyio
async def test_a_symlink_to_a_host_image_is_not_sent(science_server, tmp_path):
    """Attack: the code links names in /data to a host PNG the sandbox cannot see (and to a directory holding it),
    hoping the server, reading images as root, follows the links. Neither comes back as an image or a link."""
    secret_dir = tmp_path / "host-secrets"
    secret_dir.mkdir()
    (secret_dir / "secret.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"host secret" * 10)
    code = (f"import os\nos.symlink({str(secret_dir / 'secret.png')!r}, 'stolen.png')\n"
            f"os.symlink({str(secret_dir)!r}, 'stolen-dir')\nopen('own.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\nmine')\n")
    async with streamablehttp_client(science_server.mcp_url, headers=science_server.auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("sandbox_run_code", {"conversationId": "links", "language": "python",
                                                                  "code": code})
            assert result.isError is False, result.structuredContent
            images = [base64.b64decode(block.data) for block in blocks(result, "image")]
            assert images == [b"\x89PNG\r\n\x1a\nmine"]
            assert [link.name for link in blocks(result, "resource_link")] == ["own.png"]
