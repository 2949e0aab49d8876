#!/usr/bin/env python3
"""The MCP server's speed (issue 3): tools/call `print(1)` end to end over HTTP against bare python3 and `sandlot
run`, and tools/list requests per second at 16 and 64 connections with wrk.

Usage: bench_server.py SANDLOT [--runs N] [--seconds S] [--env NAME=VALUE ...]   (as root; wrk must be installed)
"""

import argparse
import os
import re
import subprocess
import tempfile

from benchlib import Connection, free_port, print_latency_table, remove_work, round_robin, spawn_and_wait, start_server

PYTHON = "/usr/bin/python3"


def wrk(port, token, connections, seconds, work):
    script = os.path.join(work, "tools_list.lua")
    with open(script, "w") as f:
        f.write('wrk.method = "POST"\n'
                'wrk.body = \'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\'\n'
                f'wrk.headers["Authorization"] = "Bearer {token}"\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
                'wrk.headers["Accept"] = "application/json, text/event-stream"\n')
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", script, f"http://127.0.0.1:{port}/mcp"],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, int(errors.group(1)) if errors else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="one more variable for the server (repeatable), to measure a setting")
    args = parser.parse_args()
    sandlot = os.path.abspath(args.sandlot)
    work = tempfile.mkdtemp(prefix="sandlot-bench-server-")
    port = free_port()
    token = "bench-" + os.urandom(8).hex()
    env = {"PATH": "/usr/bin:/bin", "SANDLOT_PYTHON": PYTHON, "SANDLOT_LOG": "error", "MCP_API_TOKEN": token,
           "MCP_HTTP_ADDR": f"127.0.0.1:{port}", "SANDBOX_ROOT": os.path.join(work, "root"), "FILE_SECRET": "bench",
           "SANDLOT_TUNE_CGROUPS": "true"}  # the cgroup tuning, asked for as an operator who benchmarks would
    env.update(setting.split("=", 1) for setting in args.env)
    server = start_server(sandlot, env, port)
    try:
        code_file = os.path.join(work, "print1.py")
        with open(code_file, "w") as f:
            f.write("print(1)\n")
        connection = Connection(port, token)
        rows = [
            ("bare python3", lambda: spawn_and_wait([PYTHON, "-c", "print(1)"], env)),
            ("sandlot run", lambda: spawn_and_wait([sandlot, "run", "-l", "python", "--root", os.path.join(work, "cli"), code_file], env)),
            ("tools/call over HTTP", connection.run_code_ms),
        ]
        samples = round_robin(rows, args.runs, 10)
        print(f"python3 -c 'print(1)', {args.runs} runs each, round-robin; interpreter {PYTHON}")
        print_latency_table(samples, [name for name, _ in rows], "bare python3", "bare")
        print()
        print(f"tools/list, stateless POST /mcp, wrk -t2, {args.seconds} s each (client and server share the 2 cores)")
        print(f"{'connections':<12} {'req/s':>10} {'non-2xx':>8}")
        for connections in (16, 64):
            rps, errors = wrk(port, token, connections, args.seconds, work)
            print(f"{connections:<12} {rps:10.0f} {errors:8d}")
    finally:
        server.terminate()
        server.wait(timeout=20)
        remove_work(work)


if __name__ == "__main__":
    main()
