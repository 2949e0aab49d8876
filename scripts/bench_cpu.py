#!/usr/bin/env python3
"""A compute-bound run on an idle machine (issue 32): the sum of the squares of `range(10**6)` in Python, bare,
through `sandlot run` and through a stateless `tools/call` with the defaults (no CPU cap, equal weights), and the
same two with the former default cap of half a core (`--cpus 0.5`, `SANDLOT_CPUS=0.5`) for comparison.

The rows run round-robin (one of each per round, in a new order each round); each is timed from spawn to reap, or
from request to answer. Prints one table with p50/p95 and the ratios to bare. Run as root on an otherwise idle
machine: the point is what a lone run gets.

Usage: bench_cpu.py SANDLOT [--runs N] [--exponent E]   (E: the sum runs over range(10**E), 6 by default; 7 shows the
cap on a machine where 10**6 takes less than the cap's 50 ms per 100 ms period)
"""

import argparse
import os
import tempfile

from benchlib import (Connection, free_port, print_latency_table, round_robin, spawn_and_wait, start_server,
                      stop_servers)

PYTHON = "/usr/bin/python3"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--exponent", type=int, default=6)
    args = parser.parse_args()
    code = f"print(sum(i * i for i in range(10**{args.exponent})))"
    stdout = f"{sum(i * i for i in range(10**args.exponent))}\n"
    sandlot = os.path.abspath(args.sandlot)
    work = tempfile.mkdtemp(prefix="sandlot-bench-cpu-")
    code_file = os.path.join(work, "squares.py")
    with open(code_file, "w") as f:
        f.write(code + "\n")
    env = {"PATH": "/usr/bin:/bin", "SANDLOT_PYTHON": PYTHON, "SANDLOT_LOG": "error", "FILE_SECRET": "bench",
           "SANDLOT_TUNE_CGROUPS": "true"}  # the cgroup tuning, asked for as an operator who benchmarks would
    servers, connections = [], {}
    try:
        for name, extra in (("default", {}), ("capped", {"SANDLOT_CPUS": "0.5"})):
            port, token = free_port(), "bench-" + os.urandom(8).hex()
            server_env = dict(env, MCP_API_TOKEN=token, MCP_HTTP_ADDR=f"127.0.0.1:{port}",
                              SANDBOX_ROOT=os.path.join(work, f"root-{name}"), **extra)
            servers.append(start_server(sandlot, server_env, port))
            connections[name] = Connection(port, token)
        run = [sandlot, "run", "-l", "python", "--root", os.path.join(work, "cli"), "-c", "bench"]
        rows = [
            ("bare python3", lambda: spawn_and_wait([PYTHON, code_file], env)),
            ("sandlot run", lambda: spawn_and_wait(run + [code_file], env)),
            ("tools/call (stateless)", lambda: connections["default"].run_code_ms(code, stdout)),
            ("sandlot run --cpus 0.5", lambda: spawn_and_wait(run + ["--cpus", "0.5", code_file], env)),
            ("tools/call, SANDLOT_CPUS=0.5", lambda: connections["capped"].run_code_ms(code, stdout)),
        ]
        samples = round_robin(rows, args.runs, args.warmup)
        print(f"{code}: {args.runs} runs each, round-robin; interpreter {PYTHON}; {os.cpu_count()} CPUs")
        print_latency_table(samples, [name for name, _ in rows], "bare python3", "bare")
    finally:
        stop_servers(servers, work)


if __name__ == "__main__":
    main()
