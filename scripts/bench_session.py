#!/usr/bin/env python3
"""Live sandboxes (issues 31, 32): a `session: true` tools/call of `print(1)`, a conversation's first (its live
sandbox starts) and a later one, against bare `python -c 'print(1)'` of the same interpreter (and a stateless call), a call that uses a data frame a previous call loaded against reloading it (stateless, and bare
python3), and the host memory an idle live sandbox costs with a Python interpreter loaded.

Usage: bench_session.py SANDLOT [--runs N] [--env NAME=VALUE ...]   (as root)
"""

import argparse
import os
import tempfile
import time

from benchlib import (Connection, free_port, print_latency_table, remove_work, round_robin, spawn_and_wait, start_server,
                      wait_for_templates)

PYTHON = "/usr/bin/python3"
# The scientific env of scripts/python-env.sh (numpy, pandas): the server's interpreter, as CI's and a data user's.
ENV_PYTHON = "/opt/sandlot/python/bin/python"
# A 200,000-row CSV the data-frame rows load: what an agent's "load the data, then ask questions" does.
MAKE_FRAME = ("import numpy as np, pandas as pd\n"
              "pd.DataFrame(np.random.default_rng(1).random((200_000, 8)), columns=list('abcdefgh'))"
              ".to_csv('/data/frame.csv', index=False)\n")
LOAD = "import pandas as pd\ndf = pd.read_csv('/data/frame.csv')\n"
QUERY = "print(round(float(df['a'].sum()), 3) > 0)\n"


def call_ms(connection, conversation, code, session, expected="1\n"):
    arguments = {"conversationId": conversation, "language": "python", "code": code}
    if session:
        arguments["session"] = True
    start = time.perf_counter_ns()
    reply = connection.call({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "sandbox_run_code", "arguments": arguments}})
    elapsed = (time.perf_counter_ns() - start) / 1e6
    result = reply["result"]["structuredContent"]
    assert result["stdout"] == expected, reply
    if session:
        assert result["session"]["calls"] >= 1, reply
    return elapsed


def first_call_ms(connection, counter):
    """A conversation's first `session: true` call (its live sandbox starts), in a conversation that exists (a
    stateless call made it: a new conversation's disk image is not the session's cost), then the sandbox's close
    (not timed either, so that live sandboxes do not pile up to the cap)."""
    counter[0] += 1
    conversation = f"bench-first-{counter[0]}"
    call_ms(connection, conversation, "pass", False, expected="")
    elapsed = call_ms(connection, conversation, "print(1)", True)
    connection.call({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "sandbox_session", "arguments": {"conversationId": conversation, "action": "close"}}})
    return elapsed


def status(connection, conversation):
    reply = connection.call({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "sandbox_session",
                                        "arguments": {"conversationId": conversation, "action": "status"}}})
    return reply["result"]["structuredContent"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    sandlot = os.path.abspath(args.sandlot)
    work = tempfile.mkdtemp(prefix="sandlot-bench-session-")
    port = free_port()
    token = "bench-" + os.urandom(8).hex()
    env = {"PATH": "/usr/bin:/bin", "SANDLOT_PYTHON": ENV_PYTHON, "SANDLOT_LOG": "error", "MCP_API_TOKEN": token,
           "MCP_HTTP_ADDR": f"127.0.0.1:{port}", "SANDBOX_ROOT": os.path.join(work, "root"), "FILE_SECRET": "bench",
           "SANDLOT_TUNE_CGROUPS": "true"}
    env.update(setting.split("=", 1) for setting in args.env)
    server = start_server(sandlot, env, port)
    try:
        connection = Connection(port, token)
        call_ms(connection, "bench-session", "x = 1", True, expected="")
        wait_for_templates(port, token)
        counter = [0]
        rows = [
            ("bare python3", lambda: spawn_and_wait([PYTHON, "-c", "print(1)"], env)),
            ("bare env python", lambda: spawn_and_wait([ENV_PYTHON, "-c", "print(1)"], env)),
            ("tools/call stateless", lambda: call_ms(connection, "bench-stateless", "print(1)", False)),
            ("tools/call session, first call", lambda: first_call_ms(connection, counter)),
            ("tools/call session, later call", lambda: call_ms(connection, "bench-session", "print(1)", True)),
        ]
        samples = round_robin(rows, args.runs, 10)
        print(f"print(1), {args.runs} runs each, round-robin; bare python3 is {PYTHON}, the server's and the env's "
              f"{ENV_PYTHON}")
        print_latency_table(samples, [name for name, _ in rows], "bare env python", "bare")
        print()

        call_ms(connection, "bench-frame", MAKE_FRAME, False, expected="")
        call_ms(connection, "bench-frame", LOAD, True, expected="")
        host_csv = os.path.join(work, "frame.csv")
        spawn_and_wait([ENV_PYTHON, "-c", MAKE_FRAME.replace("/data/frame.csv", host_csv)], env)
        runs = max(10, args.runs // 10)
        rows = [
            ("bare python3, reload", lambda: spawn_and_wait(
                [ENV_PYTHON, "-c", (LOAD + QUERY).replace("/data/frame.csv", host_csv)], env)),
            ("stateless call, reload", lambda: call_ms(connection, "bench-frame", LOAD + QUERY, False, "True\n")),
            ("session call, loaded", lambda: call_ms(connection, "bench-frame", QUERY, True, "True\n")),
        ]
        samples = round_robin(rows, runs, 2)
        print(f"a query of a 200,000-row data frame (pandas, {os.path.getsize(host_csv) >> 20} MiB CSV), {runs} runs each")
        print_latency_table(samples, [name for name, _ in rows], "bare python3, reload", "bare")
        print()

        time.sleep(2)  # idle: nothing of a call in flight
        idle = status(connection, "bench-session")
        usage = idle["usage"]
        print("an idle live sandbox with a Python interpreter loaded (after print(1) calls), sandbox_session status:")
        print(f"  cgroup memory.current  {usage['memoryBytes'] / 2**20:7.2f} MiB   (limit {usage['memoryLimitBytes'] >> 20} MiB)")
        commands = [p["command"].split(" -c ")[0] for p in idle["processes"]]
        print(f"  processes              {len(commands)}: {', '.join(commands)} (the jail's init and pid 1, outside "
              "the cgroup, are not counted here)")
    finally:
        server.terminate()
        server.wait(timeout=20)
        remove_work(work)


if __name__ == "__main__":
    main()
