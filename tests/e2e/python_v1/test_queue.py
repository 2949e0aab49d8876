"""Fair concurrency against the real server: at most SANDLOT_MAX_CONCURRENT_RUNS runs at once, the rest wait in a
FIFO queue and all complete; beyond SANDLOT_MAX_QUEUED the extra calls get the busy result at once; runs of one
conversation execute one at a time, in arrival order."""

import threading
import time

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from conftest import call, start_server

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


@pytest.mark.anyio
async def test_three_times_the_limit_all_complete_never_more_than_the_limit_at_once(limited_server):
    server = limited_server
    results = {}

    async def run(n):
        async with streamablehttp_client(server.mcp_url, headers=server.auth) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                code = f"import time\ntime.sleep(0.5)\nprint('run {n}')"
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
    assert elapsed >= 1.5, f"{3 * LIMIT} runs of 0.5 s, {LIMIT} at a time, took only {elapsed:.2f} s"
    assert all(r["durationMs"] < 3000 for r in records), "a run's duration must not include its wait"


def test_beyond_the_queue_bound_calls_are_busy_at_once(tiny_queue_server):
    server = tiny_queue_server
    results, threads = {}, []

    def run(n, code):
        results[n] = (call(server, {"conversationId": f"busy-{n}", "language": "python", "code": code}),
                      time.monotonic())

    # One run executes and two wait: the queue is full.
    for n in range(3):
        threads.append(threading.Thread(target=run, args=(n, "import time; time.sleep(2); print('ok')")))
        threads[-1].start()
        time.sleep(0.3)
    extra_started = time.monotonic()
    for n in range(3, 6):
        run(n, "print('never runs')")
    for n in range(3, 6):
        busy, answered = results[n]
        assert answered - extra_started < 1.0, "a busy answer must come at once"
        assert busy["busy"] is True and busy["success"] is False and busy["outcome"] == "busy"
        assert busy["retryAfterSeconds"] >= 1
        assert busy["output"].startswith("sandlot is busy: ") and "queued" in busy["output"]
    for thread in threads:
        thread.join(30)
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
        time.sleep(0.05)
    for thread in threads:
        thread.join(30)
    assert (server.root / "ordered" / "files" / "order.txt").read_text() == "0 1 2 3 4 "
    records = httpx.get(f"{server.base_url}/v1/runs", params={"conversationId": "ordered"}, headers=server.auth)
    assert most_at_once(records.json()["runs"]) == 1


def test_a_runs_timeout_counts_from_its_start_not_its_wait(tiny_queue_server):
    server = tiny_queue_server
    first = threading.Thread(target=call, args=(server, {
        "conversationId": "wait-a", "language": "python", "code": "import time; time.sleep(1.5)"}))
    first.start()
    time.sleep(0.3)
    # Waits about 1.2 s for the only place, then needs 0.3 s of its 1 s deadline.
    queued = call(server, {"conversationId": "wait-b", "language": "python",
                           "code": "import time; time.sleep(0.3); print('in time')", "timeoutSeconds": 1})
    first.join(10)
    assert (queued["outcome"], queued["stdout"], queued["timedOut"]) == ("ok", "in time\n", False)
    record = httpx.get(f"{server.base_url}/v1/runs/{queued['runId']}", headers=server.auth).json()
    assert record["startedAt"] > record["queuedAt"], "the run should have waited in the queue"


@pytest.fixture
def anyio_backend():
    return "asyncio"
