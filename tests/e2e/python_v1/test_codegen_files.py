"""The codegen-sandbox profile's transport and file tools against the real `sandlot serve`, with the official MCP
Python SDK's legacy SSE client (`mcp.client.sse.sse_client`, mcp 1.x) at `/p/codegen/sse`: initialize as
codegen-sandbox, Read/Write/Edit/Glob/Grep through the rows of docs/profiles.md's file tools table, two sessions of
one tenant sharing its workspace, and two tenants (two JWT subjects; two named workspaces of one caller) apart. The
Bash tools are tested by their own file."""

import base64
import hashlib
import hmac
import json
import os
import time

import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.shared.exceptions import McpError

from conftest import start_server

TOOLS = ["Read", "Write", "Edit", "Glob", "Grep"]


def sse_url(server, query=""):
    return f"{server.base_url}/p/codegen/sse{query}"


async def call(session, name, arguments):
    """The tool's one text and its isError."""
    result = await session.call_tool(name, arguments)
    assert len(result.content) == 1 and result.content[0].type == "text", result
    return result.content[0].text, bool(result.isError)


def workspace_dir(server, caller, named=None):
    digest = hashlib.sha256(caller.encode()).hexdigest()[:16]
    name = f"codegen-{digest}" + (f"-{named}" if named else "")
    return server.root / name / "files"


@pytest.mark.anyio
async def test_the_sdk_s_sse_client_drives_the_file_tools(server):
    async with sse_client(sse_url(server), headers=server.auth) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert (init.serverInfo.name, init.serverInfo.version) == ("codegen-sandbox", "0.1.0")
            assert init.capabilities.tools.listChanged is True
            names = [tool.name for tool in (await session.list_tools()).tools]
            assert names[:5] == TOOLS

            assert await call(session, "Write", {"file_path": "src/main.rs", "content": "fn main() {\n    let x = 1;\n}\n"}) \
                == ("wrote 29 bytes to src/main.rs", False)
            assert await call(session, "Read", {"file_path": "/workspace/src/main.rs", "offset": 2, "limit": 1}) \
                == ("2\t    let x = 1;\n", False)
            dir = workspace_dir(server, "api-token")
            (dir / "notes.md").write_text("TODO one\nTODO two\n")
            assert await call(session, "Write", {"file_path": "notes.md", "content": "x"}) \
                == ("refusing to overwrite notes.md: Read it first", True)
            assert await call(session, "Edit", {"file_path": "notes.md", "old_string": "TODO", "new_string": "DONE"}) \
                == ("refusing to edit notes.md: Read it first", True)
            await call(session, "Read", {"file_path": "notes.md"})
            text, is_error = await call(session, "Edit", {"file_path": "notes.md", "old_string": "TODO", "new_string": "DONE"})
            assert is_error and text.startswith("old_string matched 2 times in notes.md"), text
            assert await call(session, "Edit", {"file_path": "notes.md", "old_string": "TODO", "new_string": "DONE",
                                                "replace_all": True}) == ("replaced 2 occurrence(s) in notes.md", False)
            assert (dir / "notes.md").read_text() == "DONE one\nDONE two\n"

            (dir / ".gitignore").write_text("target/\n")
            (dir / "target").mkdir()
            (dir / "target" / "out.rs").write_text("fn main() {}\n")
            os.utime(dir / "notes.md", (time.time() - 100, time.time() - 100))
            assert await call(session, "Glob", {"pattern": "**/*.rs"}) == ("src/main.rs", False)
            # Newest first (notes.md was made 100 s old); hidden files skipped, as ripgrep does.
            assert await call(session, "Glob", {"pattern": "*"}) == ("src/main.rs\nnotes.md", False)

            assert await call(session, "Grep", {"pattern": "fn main"}) == ("src/main.rs:1:fn main() {\n", False)
            assert await call(session, "Grep", {"pattern": "done", "case_insensitive": True, "output_mode": "count"}) \
                == ("notes.md:2\n", False)
            assert await call(session, "Grep", {"pattern": "o", "output_mode": "files_with_matches", "glob": "*.md"}) \
                == ("notes.md\n", False)
            assert await call(session, "Grep", {"pattern": "DONE", "head_limit": 1}) == ("notes.md:1:DONE one\n", False)
            assert (await call(session, "Grep", {"pattern": "(bad"}))[1] is True

            os.symlink("/etc/passwd", dir / "passwd")
            text, is_error = await call(session, "Read", {"file_path": "passwd"})
            assert is_error and "root:" not in text
            assert await call(session, "Read", {"file_path": "../../etc/passwd"}) \
                == ("resolve path: path is outside workspace root", True)
            with pytest.raises(McpError, match="tool 'Nope' not found"):
                await session.call_tool("Nope", {})


@pytest.mark.anyio
async def test_sessions_of_a_tenant_share_a_workspace_and_named_workspaces_are_apart(server):
    async with sse_client(sse_url(server), headers=server.auth) as (r1, w1), \
            sse_client(sse_url(server), headers=server.auth) as (r2, w2), \
            sse_client(sse_url(server, "?workspace=other"), headers=server.auth) as (r3, w3):
        async with ClientSession(r1, w1) as one, ClientSession(r2, w2) as two, ClientSession(r3, w3) as other:
            for session in (one, two, other):
                await session.initialize()
            assert (await call(one, "Write", {"file_path": "shared.txt", "content": "hello\n"}))[1] is False
            assert await call(two, "Read", {"file_path": "shared.txt"}) == ("1\thello\n", False)
            # Read by the other session of the tenant: it may now overwrite it.
            assert (await call(two, "Write", {"file_path": "shared.txt", "content": "bye\n"}))[1] is False
            text, is_error = await call(other, "Read", {"file_path": "shared.txt"})
            assert (text, is_error) == ("stat: stat /workspace/shared.txt: no such file or directory", True)


def hs256(secret, subject):
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": subject, "exp": int(time.time()) + 600}).encode())
    signature = hmac.new(secret.encode(), f"{header}.{claims}".encode(), "sha256").digest()
    return f"{header}.{claims}.{b64(signature)}"


@pytest.fixture
def jwt_server(root):
    secret = "jwt-secret-" + os.urandom(8).hex()
    for server in start_server(root, {"MCP_AUTH_ENABLED": "true", "MCP_AUTH_JWT_SECRET": secret,
                                     "MCP_API_TOKEN": None}):
        server.jwt_secret = secret
        yield server


@pytest.mark.anyio
async def test_two_jwt_subjects_never_share_a_workspace(jwt_server):
    alice = {"Authorization": f"Bearer {hs256(jwt_server.jwt_secret, 'alice')}"}
    bob = {"Authorization": f"Bearer {hs256(jwt_server.jwt_secret, 'bob')}"}
    # Even naming the same workspace.
    async with sse_client(sse_url(jwt_server, "?workspace=team"), headers=alice) as (ra, wa), \
            sse_client(sse_url(jwt_server, "?workspace=team"), headers=bob) as (rb, wb):
        async with ClientSession(ra, wa) as a, ClientSession(rb, wb) as b:
            await a.initialize()
            await b.initialize()
            assert (await call(a, "Write", {"file_path": "alice.txt", "content": "mine\n"}))[1] is False
            text, is_error = await call(b, "Read", {"file_path": "alice.txt"})
            assert (text, is_error) == ("stat: stat /workspace/alice.txt: no such file or directory", True)
            assert await call(b, "Glob", {"pattern": "*"}) == ("", False)
            assert (workspace_dir(jwt_server, "alice", "team") / "alice.txt").read_text() == "mine\n"
