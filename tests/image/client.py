"""A real MCP client (the official Python SDK, mcp 1.x) against sandlot running in its container image; called by
tests/image/test-image.sh, once per phase.

    client.py URL TOKEN write STATE    initialize, list the tools and runners; run Python that writes /data/persist.txt
                                 and Bash that reads it back in a second call (/data persists between runs of a
                                 conversation); download the file by its signed URL; TypeScript; a deadline kills
                                 the run; the token and the container's paths are out of a run's reach; a run has no network
    client.py URL TOKEN read STATE     in a new container on the same volume: the file is still in /data, and
                                       its URL from the write phase (kept in the file STATE) still downloads it: the
                                       file secret was kept on the volume too

Exits non-zero with the failed assertion on any failure."""

import asyncio
import sys

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

CONVERSATION = "image-test"
CONTENT = "persisted by the image test\n"
# Any address outside the sandbox, by IP so no DNS is involved: Cloudflare's resolver, and the default gateway of
# Docker's bridge, where the host (and a published port) answers. A run has a loopback only, so both are
# unreachable at once (ENETUNREACH), not after a timeout.
NETWORK_PROBE = """
import errno, socket
for address in [("1.1.1.1", 53), ("172.17.0.1", 80)]:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(address)
        print("connected", address)
    except OSError as e:
        print("refused", address, errno.errorcode.get(e.errno, e.errno))
    finally:
        s.close()
"""

# Reads every environment a run can reach, then looks for the container's paths.
LOOK_AROUND = """
env
for f in /proc/*/environ; do tr '\\0' '\\n' < "$f"; done 2>/dev/null
for p in /run/sandlot-proc /var/run/docker.sock /var/lib/sandlot; do
    if [ -e "$p" ]; then echo "$p: present"; else echo "$p: absent"; fi
done
if mkdir /sys/fs/cgroup/escape 2>/dev/null || mkdir /sys/fs/cgroup/memory/escape 2>/dev/null; then
    echo "cgroup: made"
else
    echo "cgroup: refused"
fi
"""


async def run(session, language, code, **extra):
    arguments = {"conversationId": CONVERSATION, "language": language, "code": code, **extra}
    result = await session.call_tool("sandbox_run_code", arguments)
    data = result.structuredContent
    # The text block is what a model reads: a header line with the outcome and exit code, then the output.
    text = result.content[0].text
    assert text.startswith(f"outcome: {data['outcome']}, exit code {data['exitCode']}"), result
    assert data["output"] in text, result
    return result.isError, data


async def write_phase(session, token, state):
    tools = await session.list_tools()
    assert "sandbox_run_code" in [t.name for t in tools.tools], tools
    runners = await session.call_tool("sandbox_list_runners", {})
    languages = sorted(r["language"] for r in runners.structuredContent["languages"])
    assert languages == ["bash", "javascript", "python", "typescript"], languages

    is_error, data = await run(session, "python", f"open('/data/persist.txt', 'w').write({CONTENT!r})\nprint('python ok')")
    assert (is_error, data["stdout"]) == (False, "python ok\n"), data
    url = next(f["url"] for f in data["files"] if f["name"] == "persist.txt")
    async with httpx.AsyncClient() as client:
        response = await client.get(url, timeout=30)
        assert (response.status_code, response.text) == (200, CONTENT), (url, response.status_code, response.text)
    with open(state, "w") as f:
        f.write(url)

    is_error, data = await run(session, "bash", "cat /data/persist.txt; echo bash ok")
    assert (is_error, data["stdout"]) == (False, CONTENT + "bash ok\n"), data

    is_error, data = await run(session, "typescript", "const n: number = 6 * 7;\nconsole.log(`typescript ${n}`)")
    assert (is_error, data["stdout"]) == (False, "typescript 42\n"), data

    # The deadline kills the whole tree (a background child included) promptly: the container lets sandlot signal
    # processes of other uids.
    is_error, data = await run(session, "bash", "sleep 120 & sleep 120; echo never", timeoutSeconds=2)
    assert (is_error, data["timedOut"], data["stdout"]) == (True, True, ""), data
    assert data["durationMs"] < 30_000, data

    # What the container holds for sandlot stays out of reach of a run: the server's environment (the token), the
    # spare procfs and the writable cgroups the entrypoint made, the Docker socket of the socket variant.
    is_error, data = await run(session, "bash", LOOK_AROUND)
    assert not is_error, data
    assert token not in data["stdout"] + data["stderr"], data
    assert data["stdout"].splitlines()[-4:] == [
        "/run/sandlot-proc: absent", "/var/run/docker.sock: absent", "/var/lib/sandlot: absent", "cgroup: refused",
    ], data

    is_error, data = await run(session, "python", NETWORK_PROBE)
    assert (is_error, data["stdout"]) == (
        False,
        "refused ('1.1.1.1', 53) ENETUNREACH\nrefused ('172.17.0.1', 80) ENETUNREACH\n",
    ), data


async def read_phase(session, token, state):
    is_error, data = await run(session, "bash", "cat /data/persist.txt")
    assert (is_error, data["stdout"]) == (False, CONTENT), data
    with open(state) as f:
        url = f.read()
    async with httpx.AsyncClient() as client:
        response = await client.get(url, timeout=30)
        assert (response.status_code, response.text) == (200, CONTENT), (url, response.status_code, response.text)


async def main(url, token, phase, state):
    async with streamablehttp_client(f"{url}/mcp", headers={"Authorization": f"Bearer {token}"}) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.serverInfo.name == "sandlot", init
            await {"write": write_phase, "read": read_phase}[phase](session, token, state)
    print(f"client.py {phase}: ok")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
