"""Fair concurrency against the real server: at most SANDLOT_MAX_CONCURRENT_RUNS runs at once, the rest wait in a
FIFO queue and all complete; beyond SANDLOT_MAX_QUEUED the extra calls get the busy result at once; runs of one
conversation execute one at a time, in arrival order."""

import threading
import time
from datetime import datetime

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import call, start_server, wait_until

LIMIT = 2


@pytest.fixture
def limited_server(root):
    yield from start_server(root, {"SANDLOT_MAX_CONCURRENT_RUNS": str(LIMIT), "SANDLOT_MAX_QUEUED": "16"})


@pytest.fixture
def tiny_queue_server(root):
    yield from start_server(root, {"SANDLOT_MAX_CONCURRENT_RUNS": "1", "SANDLOT_MAX_QUEUED": "2"})


def most_at_once(records):
    """The largest number of runs whose [startedAt, finishedAt] intervals overlap."""
    edges = sorted([(r["startedAt"], 1) for r in records] + [(r["finishedAt"], -1) for r in records])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def seconds_between(earlier, later):
    """Seconds from one RFC 3339 timestamp of the history to another."""
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def states(server, **params):
    """The states of the runs in the history (newest first), optionally of one conversation."""
    runs = httpx.get(f"{server.base_url}/v1/runs", params=params, headers=server.auth).json()["runs"]
    return [r["state"] for r in runs]


@pytest.mark.anyio
async def test_three_times_the_limit_all_complete_never_more_than_the_limit_at_once(limited_server):
    server = limited_server
    results = {}

    async def run(n):
        async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                code = f"import time\ntime.sleep(1)\nprint('run {n}')"
                result = await session.call_tool(
                    "sandbox.run_code", {"conversationId": f"queue-{n}", "language": "python", "code": code})
                results[n] = result.structuredContent

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        for n in range(3 * LIMIT):
            group.start_soon(run, n)
    elapsed = time.monotonic() - started
    assert {n: (r["success"], r["stdout"]) for n, r in results.items()} == {
        n: (True, f"run {n}\n") for n in range(3 * LIMIT)}
    records = [httpx.get(f"{server.base_url}/v1/runs/{r['runId']}", headers=server.auth).json()
               for r in results.values()]
    assert most_at_once(records) == LIMIT
    assert elapsed >= 3, f"{3 * LIMIT} runs of 1 s, {LIMIT} at a time, took only {elapsed:.2f} s"
    # The last runs waited 2 s or more; a duration that counted the wait would exceed the run's own span.
    assert max(seconds_between(r["queuedAt"], r["startedAt"]) for r in records) >= 1.5
    for r in records:
        span = seconds_between(r["startedAt"], r["finishedAt"])
        assert r["durationMs"] <= span * 1000 + 500, f"a run's duration must not include its wait: {r}"


def test_beyond_the_queue_bound_calls_are_busy_at_once(tiny_queue_server):
    server = tiny_queue_server
    results, threads = {}, []

    def run(n, code):
        results[n] = (call(server, {"conversationId": f"busy-{n}", "language": "python", "code": code}),
                      time.monotonic())

    # One run executes and two wait: the queue is full (seen in the history, not guessed from a sleep). The run
    # lasts long enough that a call waiting for a place would take seconds more than the bound on "at once".
    for n in range(3):
        threads.append(threading.Thread(target=run, args=(n, "import time; time.sleep(6); print('ok')")))
        threads[-1].start()
        wait_until(lambda: len(states(server)) == n + 1, 30)
    assert sorted(states(server)) == ["queued", "queued", "running"]
    for n in range(3, 6):
        extra_started = time.monotonic()
        run(n, "print('never runs')")
        busy, answered = results[n]
        assert answered - extra_started < 2.5, "a busy answer must come at once"
        assert busy["busy"] is True and busy["success"] is False and busy["outcome"] == "busy"
        assert busy["retryAfterSeconds"] >= 1
        assert busy["output"].startswith("sandlot is busy: ") and "queued" in busy["output"]
    for thread in threads:
        thread.join(60)
    assert [(results[n][0]["success"], results[n][0]["stdout"]) for n in range(3)] == [(True, "ok\n")] * 3
    history = httpx.get(f"{server.base_url}/v1/runs", headers=server.auth).json()["runs"]
    outcomes = sorted((r["conversationId"], r["outcome"], r["startedAt"] is None) for r in history)
    assert outcomes == [(f"busy-{n}", "ok", False) for n in range(3)] + [
        (f"busy-{n}", "busy", True) for n in range(3, 6)]


def test_runs_of_one_conversation_go_one_at_a_time_in_arrival_order(limited_server):
    server = limited_server
    threads = []
    for n in range(5):
        arguments = {"conversationId": "ordered", "language": "python",
                     "code": f"import time\nwith open('order.txt', 'a') as f: f.write('{n} ')\ntime.sleep(0.2)"}
        threads.append(threading.Thread(target=call, args=(server, arguments)))
        threads[-1].start()
        # Arrival order is the order the server saw them in: the next call only once this one is in the history.
        wait_until(lambda: len(states(server, conversationId="ordered")) == n + 1, 30)
    for thread in threads:
        thread.join(60)
    assert (server.root / "ordered" / "files" / "order.txt").read_text() == "0 1 2 3 4 "
    records = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": "ordered"}, headers=server.auth)
    assert most_at_once(records.json()["runs"]) == 1


def test_a_runs_timeout_counts_from_its_start_not_its_wait(tiny_queue_server):
    server = tiny_queue_server
    first = threading.Thread(target=call, args=(server, {
        "conversationId": "wait-a", "language": "python", "code": "import time; time.sleep(5)"}))
    first.start()
    wait_until(lambda: states(server, conversationId="wait-a") == ["running"], 30)
    # Waits up to 5 s for the only place (more than its 2 s deadline), then needs 0.1 s of it.
    queued = call(server, {"conversationId": "wait-b", "language": "python",
                           "code": "import time; time.sleep(0.1); print('in time')", "timeoutSeconds": 2})
    first.join(30)
    assert (queued["outcome"], queued["stdout"], queued["timedOut"]) == ("ok", "in time\n", False)
    record = httpx.get(f"{server.base_url}/v1/runs/{queued['runId']}", headers=server.auth).json()
    waited = seconds_between(record["queuedAt"], record["startedAt"])
    assert waited > 2, f"the run should have waited in the queue longer than its deadline: {waited} s"


@pytest.fixture
def anyio_backend():
    return "asyncio"
