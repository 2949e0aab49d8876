#!/usr/bin/env python3
"""TypeScript at JavaScript's speed (issue 32): tools/call of console.log(1) over HTTP in TypeScript and in
JavaScript against bare `node -e`, interleaved round-robin, with the ratios TypeScript/JavaScript and
JavaScript/bare. Each tools/call row has a conversation of its own, as an agent's calls do, so its runs after the
first find their sandbox built ahead (SANDLOT_AHEAD_SANDBOXES); the last row is a new conversation's first run each
time (its directory made, no sandbox waiting).

The server strips TypeScript itself (SANDLOT_TYPESCRIPT_MODE=strip, the default) and its TypeScript runner is
pinned to a tsx that does not exist (SANDLOT_TYPESCRIPT=/nonexistent/tsx): a run that reached for tsx would fail, so
every TypeScript row ran without it. Rows: a typed program (types blanked in place), a program with an enum
(transformed, with an inline source map and `--enable-source-maps`), and, unless --no-tsx, the typed program
through a second server that hands TypeScript to tsx (SANDLOT_TYPESCRIPT_MODE=runner), as before issue 32.

Usage: bench_typescript.py SANDLOT [--runs N] [--no-tsx]   (as root)
"""

import argparse
import json
import os
import shutil
import tempfile

from benchlib import (Connection, descendants, free_port, percentile, print_latency_table, pss_kib, round_robin,
                      spawn_and_wait, start_server, stop_servers)

NODE = "/usr/bin/node"
JAVASCRIPT = "console.log(1)"
TYPESCRIPT = "const one: number = 1;\nconsole.log(one as number)"
ENUM = "enum One { A = 1 }\nconsole.log(One.A)"


def server_env(work, name, port, token, extra):
    env = {"PATH": "/usr/bin:/bin", "SANDLOT_NODE": NODE, "SANDLOT_LOG": "error", "MCP_API_TOKEN": token,
           "MCP_HTTP_ADDR": f"127.0.0.1:{port}", "SANDBOX_ROOT": os.path.join(work, name), "FILE_SECRET": "bench",
           "SANDLOT_TUNE_CGROUPS": "true"}
    env.update(extra)
    return env


def runner_of(connection, language):
    """The runner `sandbox_list_runners` reports for `language` (its image: the interpreter's path)."""
    reply = connection.call({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "sandbox.list_runners", "arguments": {}}})
    runners = reply["result"]["structuredContent"]["languages"]
    return next((r["image"] for r in runners if r["language"] == language), None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--no-tsx", action="store_true", help="leave out the row of TypeScript through tsx")
    args = parser.parse_args()
    sandlot = os.path.abspath(args.sandlot)
    work = tempfile.mkdtemp(prefix="sandlot-bench-typescript-")
    token = "bench-" + os.urandom(8).hex()
    servers = []
    try:
        port = free_port()
        strip = server_env(work, "strip", port, token, {"SANDLOT_TYPESCRIPT": "/nonexistent/tsx"})
        servers.append(start_server(sandlot, strip, port))
        connection = Connection(port, token)
        typescript_runner = runner_of(connection, "typescript")
        assert typescript_runner == NODE, f"TypeScript's runner is {typescript_runner}, not {NODE}"
        firsts = (f"first-{n}" for n in range(10**9))
        rows = [
            ("bare node -e", lambda: spawn_and_wait([NODE, "-e", JAVASCRIPT], strip)),
            ("JavaScript tools/call", lambda: connection.run_code_ms(JAVASCRIPT, "1\n", "javascript", "js")),
            ("TypeScript tools/call", lambda: connection.run_code_ms(TYPESCRIPT, "1\n", "typescript", "ts")),
            ("TypeScript enum (source map)", lambda: connection.run_code_ms(ENUM, "1\n", "typescript", "enum")),
            ("JavaScript, new conversation", lambda: connection.run_code_ms(JAVASCRIPT, "1\n", "javascript", next(firsts))),
        ]
        tsx = shutil.which("tsx", path="/usr/bin:/bin")
        if not args.no_tsx and tsx:
            tsx_port = free_port()
            servers.append(start_server(sandlot, server_env(work, "tsx", tsx_port, token,
                                                            {"SANDLOT_TYPESCRIPT_MODE": "runner"}), tsx_port))
            tsx_connection = Connection(tsx_port, token)
            assert runner_of(tsx_connection, "typescript").endswith("tsx")
            rows.append(("TypeScript via tsx (runner)",
                         lambda: tsx_connection.run_code_ms(TYPESCRIPT, "1\n", "typescript")))
        samples = round_robin(rows, args.runs, 5)
        print(f"console.log(1) as tools/call over HTTP, {args.runs} runs each, round-robin; node {NODE}; "
              f"TypeScript's runner: {typescript_runner} (SANDLOT_TYPESCRIPT=/nonexistent/tsx)")
        print_latency_table(samples, [name for name, _ in rows], "bare node -e", "bare")
        js, ts = samples["JavaScript tools/call"], samples["TypeScript tools/call"]
        print()
        print(f"TypeScript/JavaScript: p50 {percentile(ts, 50) / percentile(js, 50):.2f}, "
              f"p95 {percentile(ts, 95) / percentile(js, 95):.2f}")
        print(json.dumps({name: round(percentile(s, 50), 2) for name, s in samples.items()}))
        print()
        print_ahead_memory(servers[0].pid)
    finally:
        stop_servers(servers, work)


def print_ahead_memory(server):
    """The PSS of each sandbox waiting, Node started, for its conversation's next run: its Node (the process whose
    /tmp still holds the preload), its pid 1 and its init (Node's parent and grandparent on the host)."""
    def parent(pid):
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    def waiting_node(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                node = cmdline.read().startswith(NODE.encode())
        except OSError:
            return False  # gone meanwhile
        return node and os.path.exists(f"/proc/{pid}/root/tmp/.sandlot-ahead.js")
    nodes = [pid for pid in descendants(server) if waiting_node(pid)]
    for node in nodes:
        pid1 = parent(node)
        jail = pss_kib(pid1) + pss_kib(parent(pid1))
        print(f"a sandbox waiting ahead (PSS, KiB): Node {pss_kib(node)}, its init and pid 1 {jail}")
    print(f"sandboxes waiting ahead: {len(nodes)}")


if __name__ == "__main__":
    main()
