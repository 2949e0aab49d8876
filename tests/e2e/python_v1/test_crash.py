"""Restart safety: `kill -9` of the server in the middle of a run, then a new server on the same root. The run is
in the history as interrupted, and nothing of it is left: no process, no cgroup."""

import glob
import os
import signal
import time

import httpx

from conftest import call, call_in_background, sandbox_processes, start_server, wait_until
from test_cancellation import SLEEPER, wait_for_sandbox


def cgroup_slots():
    """sandlot's cgroup slot directories, in every hierarchy (v1 or v2)."""
    return glob.glob("/sys/fs/cgroup/sandlot/slot-*") + glob.glob("/sys/fs/cgroup/*/sandlot/slot-*")


def slot_processes(slot):
    try:
        with open(f"{slot}/cgroup.procs") as f:
            return {int(pid) for pid in f.read().split()}
    except OSError:
        return set()


def slots_of_this_session():
    """The slots holding a sandbox of this test session. Slots are shared by every sandlot on the machine (another
    test run, a developer's server): only those holding our processes are ours."""
    ours = set(sandbox_processes())
    return [slot for slot in cgroup_slots() if slot_processes(slot) & ours]


def identities(slots):
    """Each slot directory with its inode: a slot removed and made again (by the restarted server) is another."""
    return {slot: os.stat(slot).st_ino for slot in slots}


def left_behind(slots):
    """Of `slots` (see `identities`), those still there, the same directory and empty (a slot another sandlot took
    again since holds its processes)."""
    def same(slot, inode):
        try:
            return os.stat(slot).st_ino == inode
        except OSError:
            return False

    return [slot for slot, inode in slots.items() if same(slot, inode) and not slot_processes(slot)]


def test_a_run_killed_with_its_server_is_interrupted_and_cleaned_up(root):
    first = start_server(root, {})
    server = next(first)
    arguments = {"conversationId": "crash", "language": "python", "code": SLEEPER, "timeoutSeconds": 120}
    call_in_background(server, arguments)
    wait_for_sandbox()
    deadline = time.monotonic() + 30
    while True:
        runs = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": "crash"}, headers=server.auth)
        if [r["state"] for r in runs.json()["runs"]] == ["running"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    [run] = runs.json()["runs"]
    assert run["state"] == "running"
    wait_until(slots_of_this_session, 30)
    held = identities(slots_of_this_session())
    assert held, "the run should hold a cgroup slot"

    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(10)

    second = start_server(root, {})
    restarted = next(second)
    try:
        record = httpx.get(f"{restarted.base_url}/v1/runs/{run['id']}", headers=restarted.auth).json()
        assert (record["state"], record["outcome"]) == ("finished", "interrupted")
        assert record["error"] == "the server stopped while the run was in flight"
        wait_until(lambda: not sandbox_processes(), 20)
        assert sandbox_processes() == []
        # The restarted server removes the slot once its processes are gone, which it polls for: a moment later.
        wait_until(lambda: not left_behind(held), 15)
        assert left_behind(held) == [], "the crashed run's cgroup slot should have been removed at the restart"
        # The restarted server serves as usual.
        again = call(restarted, {"conversationId": "crash", "language": "bash", "code": "echo fine"})
        assert (again["stdout"], again["outcome"]) == ("fine\n", "ok")
    finally:
        for generator in (first, second):
            next(generator, None)  # runs start_server's clean-up (terminate and wait)
