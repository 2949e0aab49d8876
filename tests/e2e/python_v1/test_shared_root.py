"""Two nodes sharing one root (the shared-storage layout of docs/scaling.md), as two machines would: node B runs in a
mount namespace of its own, so node A's mount of a conversation's disk image is not B's, as it would not be on
another kernel. A conversation node A holds is refused on node B as busy, naming A (its calls belong on A; mounting
the image on B too would corrupt it on two kernels); once A dies, B takes the conversation over with its files."""

import os
import signal
import subprocess
import time

import httpx
import pytest

from conftest import SANDBOX_UIDS_FIRST, start_server


def run(server, code):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code", "arguments": {
        "conversationId": "shared", "language": "bash", "code": code}}}
    response = httpx.post(server.mcp_url, json=body, timeout=60,
                          headers={**server.auth, "Accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.text
    return response.json()["result"]["structuredContent"]


@pytest.fixture
def two_nodes(root):
    first, second = SANDBOX_UIDS_FIRST + 200, SANDBOX_UIDS_FIRST + 600
    # B first: its mount namespace is a private copy made before A mounts anything.
    b = start_server(root, {"SANDLOT_NODE_NAME": "node-b", "SANDLOT_SANDBOX_UIDS": f"{second}-{second + 399}"},
                     prefix=("unshare", "--mount", "--propagation", "private"))
    node_b = next(b)
    a = start_server(root, {"SANDLOT_NODE_NAME": "node-a", "SANDLOT_SANDBOX_UIDS": f"{first}-{first + 399}"})
    node_a = next(a)
    yield node_a, node_b
    for generator in (a, b):
        try:
            next(generator)
        except (StopIteration, ProcessLookupError, subprocess.TimeoutExpired):
            pass
    subprocess.run(["umount", "--lazy", str(root / "shared" / "files")], capture_output=True)


def test_a_conversation_is_one_nodes_until_that_node_is_gone(two_nodes):
    node_a, node_b = two_nodes
    made = run(node_a, "echo 'from A' > /data/note.txt; echo written")
    assert made["stdout"] == "written\n", made
    refused = run(node_b, "cat /data/note.txt")
    assert refused.get("busy") is True and "node-a" in refused["output"] + str(refused.get("error")), refused
    assert "retryAfterSeconds" in refused, refused

    node_a.process.send_signal(signal.SIGKILL)
    node_a.process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        taken = run(node_b, "cat /data/note.txt")
        if not taken.get("busy"):
            break
        assert time.monotonic() < deadline, taken
        time.sleep(0.5)
    assert taken["stdout"] == "from A\n", taken
